// The Python stage call's own cost (scripts/bench peer --python): the same trivial block run as a
// pipeline stage from a Python model (model.python: the block's forward runs in the worker's
// embedded interpreter) and from the TorchScript export of the same module, through the stage
// interface the executor drives (worker/model/block_model.h MakeBlockStage), one microbatch at a
// time. The block is y = x * w (w one parameter) on a [1, 8, 16] tensor, so each action's time is
// almost all call overhead. Only F enters Python (B and W are the C++ split on the graph F built),
// so the F column's Python - TorchScript difference is the per-action overhead of the Python path;
// B and W are printed to show they do not differ. A third kind, "traced", is the Python model with
// model.python.compile: trace (each block torch.jit.trace'd at stage creation, F run in C++
// without Python). Each kind is timed on a thread that did not start Python, as a worker's job
// thread usually is (interpreter.h ScopedGil says why it matters).
//
// usage: zpipe_python_stage_bench --python MODEL.py --torchscript MODEL.pt [--reps N]
//            [--factory NAME] [--args JSON] [--seq L] [--batch B] [--blocks BEGIN:END]
//            [--only python|traced|torchscript]
//   MODEL.py's build_model() and MODEL.pt are the same 3-block nn.Sequential (embedding, the
//   trivial block, head), which bench/peer/peer_bench.py writes. Prints one line per kind and
//   action with p50 and p99 in microseconds, then a JSON line for the caller.
//   The other flags time a real model's stage instead (the default is the trivial one:
//   build_model, no args, L = 8, B = 1, blocks 1:2): MODEL.py's NAME(**JSON) and its TorchScript
//   export, blocks [BEGIN, END) as a middle stage on a [B, L] microbatch. E.g. the peer bench's
//   GPT (bench/peer: its gpt.pt), all four transformer blocks as one stage:
//     zpipe_python_stage_bench --python examples/own-model/model.py --torchscript gpt.pt
//       --factory build --args '{"vocab": 256, "seq_len": 64, "hidden": 64, "heads": 4,
//       "layers": 4}' --seq 64 --batch 2 --blocks 1:5 --reps 200
//   --only times one kind (both are still loaded), e.g. to profile it with perf.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "flags/flags.h"
#include "worker/model/block_model.h"
#include "worker/model/torchscript.h"
#include "worker/python/python_model.h"

namespace zpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using worker::model::BlockModel;

// The stage timed: blocks [begin, end) of a model built for [batch, seq] microbatches.
struct Setup {
  int batch = 1;
  int seq = 8;
  int begin = 1;
  int end = 2;
};

struct Percentiles {
  double p50 = 0;
  double p99 = 0;
};

Percentiles Of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  return {at(0.5), at(0.99)};
}

torch::Tensor Random(const worker::model::TensorSpec& spec) {
  return torch::randn(spec.shape, torch::TensorOptions().dtype(spec.dtype));
}

// F, B and W of the stage (a middle one: stage 1 of 3) `reps` times, after a warm-up;
// microseconds per action by action name.
std::map<std::string, std::vector<double>> TimeStage(std::shared_ptr<BlockModel> model,
                                                     const Setup& setup, int reps) {
  worker::model::StageOptions o;
  o.stage = 1;
  o.num_stages = 3;
  o.num_microbatches = 1;
  auto stage = worker::model::MakeBlockStage(std::move(model), setup.begin, setup.end, o);
  if (!stage.ok()) {
    std::cerr << "python_stage_bench: " << stage.status() << "\n";
    std::exit(1);
  }
  if (!torch::isFloatingType((*stage)->InputSpec(setup.batch).dtype)) {
    std::cerr << "python_stage_bench: blocks " << setup.begin << ":" << setup.end
              << " take more than one tensor or no floating one; time other blocks\n";
    std::exit(2);
  }
  const torch::Tensor input = Random((*stage)->InputSpec(setup.batch));
  const torch::Tensor grad = Random((*stage)->OutputGradSpec(setup.batch));
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
  std::string python_file, torchscript_file, factory = "build_model", args_json, only;
  Setup setup;
  int reps = 2000;
  std::unique_ptr<CLI::App> app = flags::NewApp(
      "zpipe_python_stage_bench",
      "zpipe_python_stage_bench --python MODEL.py --torchscript MODEL.pt [--reps N] "
      "[--factory NAME] [--args JSON] [--seq L] [--batch B] [--blocks BEGIN:END] "
      "[--only python|traced|torchscript]",
      "  the per-action cost of a stage defined in Python against the same stage in TorchScript\n"
      "  (scripts/bench peer --python runs it)");
  flags::AddText(*app, "--python", &python_file, "MODEL.py", "the Python model's file (required)");
  flags::AddText(*app, "--torchscript", &torchscript_file, "MODEL.pt",
                 "the same model, scripted (required)");
  flags::AddInteger(*app, "--reps", &reps, 10, INT32_MAX, "timed calls of each kind (default 2000, at least 10)");
  flags::AddChecked(*app, "--only", "python|traced|torchscript", "time one path alone (for perf)",
                    flags::OneOf("python traced torchscript"),
                    [&only](const std::string& v) { only = v; });
  flags::AddText(*app, "--factory", &factory, "NAME", "the model.py function (default build_model)");
  flags::AddText(*app, "--args", &args_json, "JSON", "the factory's keyword arguments");
  flags::AddInteger(*app, "--seq", &setup.seq, 1, INT32_MAX, "sequence length", "L");
  flags::AddInteger(*app, "--batch", &setup.batch, 1, INT32_MAX, "microbatch size", "B");
  flags::AddChecked(
      *app, "--blocks", "BEGIN:END", "a middle stage: blocks BEGIN..END-1 (1 <= BEGIN < END)",
      [](const std::string& v) {
        int begin = 0, end = 0;
        return std::sscanf(v.c_str(), "%d:%d", &begin, &end) == 2 && begin >= 1 && end > begin
                   ? std::string()
                   : "want BEGIN:END with 1 <= BEGIN < END, got '" + v + "'";
      },
      [&setup](const std::string& v) {
        std::sscanf(v.c_str(), "%d:%d", &setup.begin, &setup.end);
      });
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    return *exit;
  }
  if (python_file.empty() || torchscript_file.empty()) {
    std::cerr << "zpipe_python_stage_bench: --python and --torchscript are required\n"
              << flags::UsageLine(*app);
    return 2;
  }
  torch::set_num_threads(1);
  auto ts = worker::model::TorchScriptModel::Load(torchscript_file, setup.seq, setup.batch);
  auto py = worker::python::LoadPythonModel(
      {.file = python_file, .factory = factory, .args_json = args_json, .seed = 0}, setup.seq,
      setup.batch);
  auto traced = worker::python::LoadPythonModel({.file = python_file,
                                                 .factory = factory,
                                                 .args_json = args_json,
                                                 .seed = 0,
                                                 .compile = worker::python::CompileMode::kTrace},
                                                setup.seq, setup.batch);
  for (const absl::Status& st : {ts.status(), py.status(), traced.status()}) {
    if (!st.ok()) {
      std::cerr << "python_stage_bench: " << st << "\n";
      return 1;
    }
  }
  std::map<std::string, std::map<std::string, Percentiles>> result;
  // Alternating halves, so that load from elsewhere on the machine hits both kinds alike.
  std::map<std::string, std::map<std::string, std::vector<double>>> samples;
  for (int half = 0; half < 4; ++half) {
    for (const auto& [kind, model] :
         {std::pair<std::string, std::shared_ptr<BlockModel>>{"torchscript", *ts},
          {"python", *py},
          {"traced", *traced}}) {
      if (!only.empty() && kind != only) continue;
      // On a thread of its own, as on a worker's job thread, which from the worker's second job
      // on (or after a profile) is not the thread that started Python. The JIT's optimisation
      // switch is per thread (TorchScriptModel::Load turned it off on this one): off there too.
      std::map<std::string, std::vector<double>> timed;
      std::thread job([&] {
        torch::jit::setGraphExecutorOptimize(false);
        timed = TimeStage(model, setup, reps / 4);
      });
      job.join();
      for (auto& [action, us] : timed) {
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
  const Percentiles ts_f = result["torchscript"]["F"];
  if (only.empty()) {
    for (const char* kind : {"python", "traced"}) {
      const Percentiles f = result[kind]["F"];
      std::cout << absl::StrFormat("%s F overhead over torchscript: p50 %+.1f us, p99 %+.1f us\n",
                                   kind, f.p50 - ts_f.p50, f.p99 - ts_f.p99);
    }
  }
  std::cout << json << "}\n";
  return 0;
}

}  // namespace
}  // namespace zpipe::bench

int main(int argc, char** argv) { return zpipe::bench::Main(argc, argv); }
