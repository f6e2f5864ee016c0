// The Python stage call's own cost (scripts/bench peer --python): the same trivial block run as a
// pipeline stage from a Python model (model.python: the block's forward runs in the worker's
// embedded interpreter) and from the TorchScript export of the same module, through the stage
// interface the executor drives (worker/model/block_model.h MakeBlockStage), one microbatch at a
// time. The block is y = x * w (w one parameter) on a [1, 8, 16] tensor, so each action's time is
// almost all call overhead. Only F enters Python (B and W are the C++ split on the graph F built),
// so the F column's Python - TorchScript difference is the per-action overhead of the Python path;
// B and W are printed to show they do not differ.
//
// usage: zpipe_python_stage_bench --python MODEL.py --torchscript MODEL.pt [--reps N]
//   MODEL.py's build_model() and MODEL.pt are the same 3-block nn.Sequential (embedding, the
//   trivial block, head), which bench/peer/peer_bench.py writes. Prints one line per kind and
//   action with p50 and p99 in microseconds, then a JSON line for the caller.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "worker/model/block_model.h"
#include "worker/model/torchscript.h"
#include "worker/python/python_model.h"

namespace zpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using worker::model::BlockModel;

constexpr int kBatch = 1;
constexpr int kSeq = 8;
constexpr int kHidden = 16;

struct Percentiles {
  double p50 = 0;
  double p99 = 0;
};

Percentiles Of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  return {at(0.5), at(0.99)};
}

// F, B and W of the trivial block (stage 1 of 3) `reps` times, after a warm-up; microseconds per
// action by action name.
std::map<std::string, std::vector<double>> TimeStage(std::shared_ptr<BlockModel> model, int reps) {
  worker::model::StageOptions o;
  o.stage = 1;
  o.num_stages = 3;
  o.num_microbatches = 1;
  auto stage = worker::model::MakeBlockStage(std::move(model), 1, 2, o);
  if (!stage.ok()) {
    std::cerr << "python_stage_bench: " << stage.status() << "\n";
    std::exit(1);
  }
  const torch::Tensor input = torch::randn({kBatch, kSeq, kHidden});
  const torch::Tensor grad = torch::randn({kBatch, kSeq, kHidden});
  std::map<std::string, std::vector<double>> out;
  const int warmup = std::max(10, reps / 10);
  for (int i = 0; i < warmup + reps; ++i) {
    const Clock::time_point t0 = Clock::now();
    auto y = (*stage)->Forward(0, input);
    const Clock::time_point t1 = Clock::now();
    auto dx = y.ok() ? (*stage)->BackwardInput(0, grad) : y.status();
    const Clock::time_point t2 = Clock::now();
    absl::Status w = dx.ok() ? (*stage)->BackwardWeight(0) : dx.status();
    const Clock::time_point t3 = Clock::now();
    if (!w.ok()) {
      std::cerr << "python_stage_bench: " << w << "\n";
      std::exit(1);
    }
    if (i < warmup) continue;
    auto us = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    out["F"].push_back(us(t0, t1));
    out["B"].push_back(us(t1, t2));
    out["W"].push_back(us(t2, t3));
  }
  return out;
}

int Main(int argc, char** argv) {
  std::string python_file, torchscript_file;
  int reps = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--python") {
      python_file = argv[i + 1];
    } else if (flag == "--torchscript") {
      torchscript_file = argv[i + 1];
    } else if (flag == "--reps") {
      reps = std::max(10, std::atoi(argv[i + 1]));
    } else {
      std::cerr << "python_stage_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (python_file.empty() || torchscript_file.empty()) {
    std::cerr << "usage: zpipe_python_stage_bench --python MODEL.py --torchscript MODEL.pt "
                 "[--reps N]\n";
    return 2;
  }
  torch::set_num_threads(1);
  auto ts = worker::model::TorchScriptModel::Load(torchscript_file, kSeq, kBatch);
  auto py = worker::python::LoadPythonModel(
      {.file = python_file, .factory = "build_model", .args_json = "", .seed = 0}, kSeq, kBatch);
  if (!ts.ok() || !py.ok()) {
    std::cerr << "python_stage_bench: " << (ts.ok() ? py.status() : ts.status()) << "\n";
    return 1;
  }
  std::map<std::string, std::map<std::string, Percentiles>> result;
  // Alternating halves, so that load from elsewhere on the machine hits both kinds alike.
  std::map<std::string, std::map<std::string, std::vector<double>>> samples;
  for (int half = 0; half < 4; ++half) {
    for (const auto& [kind, model] :
         {std::pair<std::string, std::shared_ptr<BlockModel>>{"torchscript", *ts},
          {"python", *py}}) {
      for (auto& [action, us] : TimeStage(model, reps / 4)) {
        auto& all = samples[kind][action];
        all.insert(all.end(), us.begin(), us.end());
      }
    }
  }
  std::string json = "{";
  for (const auto& [kind, actions] : samples) {
    for (const auto& [action, us] : actions) {
      const Percentiles p = Of(us);
      result[kind][action] = p;
      std::cout << absl::StrFormat("%-11s %s  p50 %7.1f us  p99 %7.1f us  (%zu actions)\n", kind,
                                   action, p.p50, p.p99, us.size());
      json += absl::StrFormat("%s\"%s_%s_p50_us\": %.2f, \"%s_%s_p99_us\": %.2f",
                              json.size() > 1 ? ", " : "", kind, action, p.p50, kind, action,
                              p.p99);
    }
  }
  const Percentiles py_f = result["python"]["F"], ts_f = result["torchscript"]["F"];
  std::cout << absl::StrFormat("python F overhead over torchscript: p50 %+.1f us, p99 %+.1f us\n",
                               py_f.p50 - ts_f.p50, py_f.p99 - ts_f.p99);
  std::cout << json << "}\n";
  return 0;
}

}  // namespace
}  // namespace zpipe::bench

int main(int argc, char** argv) { return zpipe::bench::Main(argc, argv); }
