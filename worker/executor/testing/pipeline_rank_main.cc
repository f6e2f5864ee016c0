// zpipe-pipeline-rank: one pipeline rank of a GPT job, without a coordinator: the ranks of one
// machine meet through a directory (file_store.h) and talk over the TCP streams on loopback. scripts/gpu-check
// runs p = 2 as two of these sharing one GPU (NCCL needs a GPU per rank), and the GPT throughput
// figure as one. Prints one JSON object per iteration on stdout (or --out FILE):
//   {"iteration":0,"loss":4.1,"duration_s":..,"busy_s":..,"bubble_ratio":..,"tokens":..}
// ("loss" on the rank holding the last stage only).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "flags/flags.h"
#include "worker/comm/file_store.h"
#include "worker/executor/testing/pipeline_harness.h"

namespace zpipe::worker {
namespace {

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

// The command line; defaults as scripts/gpu-check expects them.
struct Flags {
  std::string store, out, schedule = "zb-h1", device = "cpu", precision = "fp32";
  int rank = 0, pipeline = 1, microbatches = 4, iterations = 5;
  int layers = 4, hidden = 64, heads = 4, seq_len = 32, vocab = 128, microbatch_size = 2;
  int seed = 7;
  double lr = 0.001;
};

std::unique_ptr<CLI::App> NewFlagsApp(Flags& f) {
  auto app = flags::NewApp(
      "zpipe-pipeline-rank", "zpipe-pipeline-rank --store DIR [--rank R] [--pipeline P] [flags]",
      "One pipeline rank of a GPT job without a coordinator: the ranks meet through --store and "
      "print one JSON object per iteration.");
  constexpr int kMax = 1 << 20;
  flags::AddText(*app, "--store", &f.store, "DIR", "the directory the ranks meet in (required)");
  flags::AddInteger(*app, "--rank", &f.rank, 0, kMax, "this process's pipeline rank", "R");
  flags::AddInteger(*app, "--pipeline", &f.pipeline, 1, kMax, "pipeline ranks", "P");
  flags::AddText(*app, "--schedule", &f.schedule, "KIND", "the schedule (zb-h1, zb-v, ...)");
  flags::AddInteger(*app, "--microbatches", &f.microbatches, 1, kMax, "microbatches", "M");
  flags::AddInteger(*app, "--iterations", &f.iterations, 0, kMax, "iterations to run");
  flags::AddText(*app, "--device", &f.device, "cpu|cuda:N", "where the stages run");
  flags::AddText(*app, "--precision", &f.precision, "fp32|bf16", "the compute precision");
  flags::AddInteger(*app, "--layers", &f.layers, 1, kMax, "GPT layers", "L");
  flags::AddInteger(*app, "--hidden", &f.hidden, 1, kMax, "GPT hidden size", "H");
  flags::AddInteger(*app, "--heads", &f.heads, 1, kMax, "attention heads", "A");
  flags::AddInteger(*app, "--seq-len", &f.seq_len, 1, kMax, "tokens per sequence", "T");
  flags::AddInteger(*app, "--vocab", &f.vocab, 2, kMax, "vocabulary size", "V");
  flags::AddInteger(*app, "--microbatch-size", &f.microbatch_size, 1, kMax,
                    "sequences per microbatch", "B");
  flags::AddNumber(*app, "--lr", &f.lr, "the learning rate");
  flags::AddInteger(*app, "--seed", &f.seed, 0, std::numeric_limits<int>::max(),
                    "the initialisation and data seed", "S");
  flags::AddText(*app, "--out", &f.out, "FILE", "write the JSON lines here instead of stdout");
  return app;
}

int Main(int argc, char** argv) {
  Flags flags;
  auto app = NewFlagsApp(flags);
  if (std::optional<int> rc =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    return *rc;
  }
  if (flags.store.empty()) return Fail("--store DIR is required");
  auto kind = core::ParseScheduleKind(flags.schedule);
  if (!kind.ok()) return Fail(std::string(kind.status().message()));
  auto lowered = testing::LoweredPlan(*kind, flags.pipeline, flags.microbatches);
  if (!lowered.ok()) return Fail(std::string(lowered.status().message()));

  testing::RankOptions ro;
  ro.key_prefix = "pipeline-rank/";
  ro.gpt = model::GptConfig{.layers = flags.layers,
                            .hidden = flags.hidden,
                            .heads = flags.heads,
                            .seq_len = flags.seq_len,
                            .vocab = flags.vocab};
  ro.init_seed = flags.seed;
  ro.config.microbatch_size = flags.microbatch_size;
  absl::StatusOr<Precision> precision = ParsePrecision(flags.precision);
  if (!precision.ok()) return Fail(absl::StrCat("--precision: ", precision.status().message()));
  ro.config.precision = *precision;
  ro.config.lr = flags.lr;
  absl::StatusOr<torch::Device> device = ParseDevice(flags.device);
  if (!device.ok()) return Fail(std::string(device.status().message()));
  ro.config.device = *device;
  auto data = model::SyntheticTokenData::Make(ro.init_seed, ro.gpt.vocab, ro.gpt.seq_len,
                                              ro.config.microbatch_size);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  auto store = NewFileStore(flags.store);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  auto made = testing::MakePipelineRank(*lowered, flags.rank, 0, ro, **store, &*data, nullptr);
  if (!made.ok()) return Fail(std::string(made.status().message()));

  std::FILE* out = stdout;
  if (!flags.out.empty()) {
    out = std::fopen(flags.out.c_str(), "w");
    if (out == nullptr) return Fail(absl::StrCat("cannot write ", flags.out));
  }
  const int rc = RunIterations(*made->exec, flags.iterations, out);
  if (out != stdout) std::fclose(out);
  return rc;
}

}  // namespace
}  // namespace zpipe::worker

int main(int argc, char** argv) { return zpipe::worker::Main(argc, argv); }
