// zpipe-pipeline-rank: one pipeline rank of a GPT job, without a coordinator: the ranks of one
// machine meet through a directory (file_store.h) and talk over the TCP streams on loopback. scripts/gpu-check
// runs p = 2 as two of these sharing one GPU (NCCL needs a GPU per rank), and the GPT throughput
// figure as one. Prints one JSON object per iteration on stdout (or --out FILE):
//   {"iteration":0,"loss":4.1,"duration_s":..,"busy_s":..,"bubble_ratio":..,"tokens":..}
// ("loss" on the rank holding the last stage only).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "worker/comm/file_store.h"
#include "worker/executor/testing/pipeline_harness.h"

namespace zpipe::worker {
namespace {

constexpr char kUsage[] =
    "usage: zpipe-pipeline-rank --store DIR [--rank R] [--pipeline P] [--schedule zb-h1]\n"
    "         [--microbatches M] [--iterations N] [--device cpu|cuda:N] [--precision fp32|bf16]\n"
    "         [--layers L] [--hidden H] [--heads A] [--seq-len T] [--vocab V]\n"
    "         [--microbatch-size B] [--lr LR] [--seed S] [--out FILE]\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "zpipe-pipeline-rank: %s\n", message.c_str());
  return 1;
}

// The --device flag: a device LibTorch knows and sees.
absl::StatusOr<torch::Device> ParseDevice(const std::string& flag) {
  std::optional<torch::Device> device;
  try {
    device.emplace(flag);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--device '", flag, "': ", e.what()));
  }
  if (device->is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", flag, ": LibTorch sees no CUDA device"));
  }
  return *device;
}

// Runs `iterations` iterations, printing one JSON line each to `out`; 0, or 1 after an error.
int RunIterations(Executor& exec, int iterations, std::FILE* out) {
  for (int it = 0; it < iterations; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = exec.RunIteration(it);
    if (!s.ok()) return Fail(absl::StrCat("iteration ", it, ": ", s.status().message()));
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::ordered_json row = {{"iteration", it},
                                  {"wall_s", wall_s},
                                  {"duration_s", s->duration_s},
                                  {"busy_s", s->busy_s},
                                  {"forward_s", s->forward_s},
                                  {"backward_s", s->backward_s},
                                  {"weight_s", s->weight_s},
                                  {"step_s", s->step_s},
                                  {"bubble_ratio", s->bubble_ratio},
                                  {"tokens", s->tokens}};
    if (s->loss) row["loss"] = *s->loss;
    const std::string line = row.dump() + "\n";
    std::fputs(line.c_str(), out);
    std::fflush(out);
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"rank", "0"},
                                              {"pipeline", "1"},
                                              {"schedule", "zb-h1"},
                                              {"microbatches", "4"},
                                              {"iterations", "5"},
                                              {"device", "cpu"},
                                              {"precision", "fp32"},
                                              {"layers", "4"},
                                              {"hidden", "64"},
                                              {"heads", "4"},
                                              {"seq-len", "32"},
                                              {"vocab", "128"},
                                              {"microbatch-size", "2"},
                                              {"lr", "0.001"},
                                              {"seed", "7"},
                                              {"store", ""},
                                              {"out", ""}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0 || i + 1 >= argc || !flags.count(arg.substr(2))) {
      std::fputs(kUsage, stderr);
      return Fail(absl::StrCat("bad argument '", arg, "'"));
    }
    flags[arg.substr(2)] = argv[++i];
  }
  auto integer = [&](const char* name) {
    int v = 0;
    if (!absl::SimpleAtoi(flags[name], &v)) {
      std::fprintf(stderr, "zpipe-pipeline-rank: --%s: '%s' is not an integer\n", name,
                   flags[name].c_str());
      std::exit(2);
    }
    return v;
  };
  if (flags["store"].empty()) return Fail("--store DIR is required");
  auto kind = core::ParseScheduleKind(flags["schedule"]);
  if (!kind.ok()) return Fail(std::string(kind.status().message()));
  const int p = integer("pipeline"), rank = integer("rank"), m = integer("microbatches");
  auto lowered = testing::LoweredPlan(*kind, p, m);
  if (!lowered.ok()) return Fail(std::string(lowered.status().message()));

  testing::RankOptions ro;
  ro.key_prefix = "pipeline-rank/";
  ro.gpt = model::GptConfig{.layers = integer("layers"),
                            .hidden = integer("hidden"),
                            .heads = integer("heads"),
                            .seq_len = integer("seq-len"),
                            .vocab = integer("vocab")};
  ro.init_seed = integer("seed");
  ro.config.microbatch_size = integer("microbatch-size");
  absl::StatusOr<Precision> precision = ParsePrecision(flags["precision"]);
  if (!precision.ok()) return Fail(absl::StrCat("--precision: ", precision.status().message()));
  ro.config.precision = *precision;
  if (!absl::SimpleAtod(flags["lr"], &ro.config.lr)) return Fail("--lr: not a number");
  absl::StatusOr<torch::Device> device = ParseDevice(flags["device"]);
  if (!device.ok()) return Fail(std::string(device.status().message()));
  ro.config.device = *device;
  auto data = model::SyntheticTokenData::Make(ro.init_seed, ro.gpt.vocab, ro.gpt.seq_len,
                                              ro.config.microbatch_size);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  auto store = NewFileStore(flags["store"]);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  auto made = testing::MakePipelineRank(*lowered, rank, 0, ro, **store, &*data, nullptr);
  if (!made.ok()) return Fail(std::string(made.status().message()));

  std::FILE* out = stdout;
  if (!flags["out"].empty()) {
    out = std::fopen(flags["out"].c_str(), "w");
    if (out == nullptr) return Fail(absl::StrCat("cannot write ", flags["out"]));
  }
  const int rc = RunIterations(*made->exec, integer("iterations"), out);
  if (out != stdout) std::fclose(out);
  return rc;
}

}  // namespace
}  // namespace zpipe::worker

int main(int argc, char** argv) { return zpipe::worker::Main(argc, argv); }
