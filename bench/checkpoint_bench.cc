// Checkpoint stall benchmark (scripts/bench checkpoint): how long a checkpoint holds up the
// training loop at the iteration boundary, against the iteration time, for the example jobs.
//
// Every pipeline rank is a thread of this process talking over loopback (TCP streams) (as in
// bench/runtime_bench.cc) and checkpoints through the worker's own JobCheckpointer into a
// temporary directory, every `--every` iterations. Three runs per example:
//   none   no checkpoints: the iteration time to compare with;
//   sync   the whole save in the loop (what workers did before issue 12);
//   async  the shipped path: copy to host memory in the loop, write on a background thread.
// stall = time spent in JobCheckpointer::AfterIteration at a checkpoint (async: the copy plus
// any wait for the previous write), mean over checkpoints and ranks. iter = mean over measured
// iterations of the slowest rank's iteration time (RunIteration), so a stall on one rank that
// holds up its neighbours shows up there too.
//
// Usage: zpipe_checkpoint_bench [--iters N] [--every K] [--only NAME]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cost_model.h"
#include "core/planning.h"
#include "core/schedule.h"
#include "flags/flags.h"
#include "worker/comm/key_value_store.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/daemon/job_checkpoint.h"
#include "worker/executor/executor.h"
#include "worker/model/data.h"
#include "worker/model/gpt.h"
#include "worker/model/synthetic.h"

namespace zpipe::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int g_iters = 10;  // measured iterations (after one warm-up iteration)
int g_every = 2;   // checkpoint every K iterations
std::string g_only;

[[noreturn]] void Die(const absl::Status& st, const std::string& what) {
  std::fprintf(stderr, "checkpoint_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(v.status(), what);
  return *std::move(v);
}

// One example job, as in examples/*.yaml.
struct Example {
  std::string name;
  std::string note;
  int p = 4;
  int m = 8;
  int microbatch_size = 1;
  bool gpt = false;
  worker::model::GptConfig gpt_config;
  double f_ms = 0, b_ms = 0, w_ms = 0;  // synthetic, per rank (ZB-V gives each chunk half)
  double activation_kb = 0;
  double params_mb = 0;  // synthetic, per rank
};

enum class Mode { kNone, kSync, kAsync };
const char* ModeName(Mode m) {
  return m == Mode::kNone ? "none" : m == Mode::kSync ? "sync" : "async";
}

struct Result {
  double iter_ms = 0;       // mean over iterations of the slowest rank's RunIteration
  double stall_ms = 0;      // mean over checkpoints (and ranks) of AfterIteration
  double max_stall_ms = 0;  // worst single stall
  double snapshot_ms = 0;   // async: of which copying to host memory
  double waited_ms = 0;     // async: of which waiting for the previous write
  int waits = 0;            // async: checkpoints that had to wait for the previous write
  int checkpoints = 0;      // per rank
  double state_mb = 0;      // checkpoint bytes per rank (mean), MB
};

int g_run = 0;

Result Run(const Example& ex, Mode mode) {
  const core::ScheduleKind kind = core::ScheduleKind::kZbV;
  const core::Placement placement = core::PlacementFor(kind, ex.p);
  const int v = placement.chunks_per_rank();
  core::PlanRequest req;
  req.schedule = std::string(core::ScheduleName(kind));
  req.pipeline = ex.p;
  req.microbatches = ex.m;
  req.inputs = [&ex, v](const core::Placement& placement) {
    return core::UniformInputs(placement,
                               core::StageCost{.f = std::max(ex.f_ms / v, 1.0),
                                               .b = std::max(ex.b_ms / v, 1.0),
                                               .w = std::max(ex.w_ms / v, 1.0)},
                               0.05);
  };
  const core::Plan plan = Must(core::PlanSchedule(req), "plan").plan;
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("zpipe-ckpt-bench-", ::getpid());
  fs::remove_all(dir);
  auto store = worker::NewInMemoryStore();
  const std::string prefix = absl::StrCat("ckbench/", g_run++, "/");
  const int total = 1 + g_iters;
  std::vector<std::vector<double>> iter_s(ex.p, std::vector<double>(total, 0));
  std::vector<std::vector<worker::JobCheckpointer::Step>> steps(ex.p);
  std::vector<absl::Status> errors(ex.p);
  std::unique_ptr<worker::model::SyntheticTokenData> data;
  if (ex.gpt) {
    data = std::make_unique<worker::model::SyntheticTokenData>(
        Must(worker::model::SyntheticTokenData::Make(1, ex.gpt_config.vocab, ex.gpt_config.seq_len,
                                                     ex.microbatch_size),
             "data"));
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ex.p; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](absl::Status st) { errors[rank] = st; };
      if (ex.gpt) torch::set_num_threads(1);
      worker::CommunicatorOptions opts;
      opts.pipeline_rank = rank;
      opts.pipeline_size = ex.p;
      opts.key_prefix = prefix;
      opts.timeout = absl::Seconds(120);
      auto comm = worker::NewTcpCommunicator(opts, *store);
      if (!comm.ok()) return fail(comm.status());
      std::vector<std::unique_ptr<worker::model::Stage>> stages;
      for (int c = 0; c < v; ++c) {
        worker::model::StageOptions so;
        so.stage = placement.StageOf(rank, c);
        so.num_stages = placement.num_stages();
        so.num_microbatches = ex.m;
        so.seed = 1;
        absl::StatusOr<std::unique_ptr<worker::model::Stage>> st;
        if (ex.gpt) {
          st = worker::model::MakeGptStage(ex.gpt_config, so);
        } else {
          worker::model::SyntheticStageConfig sc;
          sc.forward_ms = ex.f_ms / v;
          sc.backward_ms = ex.b_ms / v;
          sc.weight_ms = ex.w_ms / v;
          sc.activation_kb = ex.activation_kb;
          sc.params_mb = ex.params_mb / v;
          st = worker::model::MakeSyntheticStage(sc, so);
        }
        if (!st.ok()) return fail(st.status());
        stages.push_back(*std::move(st));
      }
      worker::ExecutorConfig config;
      config.microbatch_size = ex.microbatch_size;
      config.timeout = absl::Seconds(120);
      config.optimizer = worker::Optimizer::kAdamW;
      config.lr = ex.gpt ? 3e-3 : 1e-3;
      auto exec = worker::Executor::Make(plan, rank, 0, config, std::move(stages), **comm,
                                         data.get(), nullptr, nullptr);
      if (!exec.ok()) return fail(exec.status());
      std::unique_ptr<worker::JobCheckpointer> ckpt;
      if (mode != Mode::kNone) {
        worker::JobConfig job;
        job.job_id = "bench";
        job.rank = worker::RankPosition{.pipeline_rank = rank,
                                        .pipeline_size = ex.p,
                                        .data_rank = 0,
                                        .data_size = 1,
                                        .global_rank = rank};
        job.plan = plan;
        job.settings.name = ex.name;
        job.settings.train.iterations = total;
        job.settings.checkpoint = worker::CheckpointConfig{
            .dir = dir.string(), .every = g_every, .keep = 2, .skip_errors = false};
        auto made = worker::JobCheckpointer::Make(
            job, worker::JobCheckpointerOptions{.background = mode == Mode::kAsync});
        if (!made.ok()) return fail(made.status());
        ckpt = *std::move(made);
      }
      for (int it = 0; it < total; ++it) {
        const auto t0 = Clock::now();
        auto s = (*exec)->RunIteration(it);
        if (!s.ok()) return fail(s.status());
        iter_s[rank][it] = std::chrono::duration<double>(Clock::now() - t0).count();
        if (ckpt == nullptr) continue;
        auto step = ckpt->AfterIteration(**exec, it + 1, s->loss);
        if (!step.ok()) return fail(step.status());
        // The final save (it + 1 == total) is the job's end, not a boundary inside training.
        if (step->started && it + 1 < total && it > 0) steps[rank].push_back(*step);
      }
      if (ckpt != nullptr) {
        if (auto end = ckpt->Finish(); !end.ok()) return fail(end.status());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : errors) {
    if (!st.ok()) Die(st, absl::StrCat(ex.name, " ", ModeName(mode)));
  }
  Result r;
  for (int it = 1; it < total; ++it) {
    double slowest = 0;
    for (int rank = 0; rank < ex.p; ++rank) slowest = std::max(slowest, iter_s[rank][it]);
    r.iter_ms += slowest * 1e3 / g_iters;
  }
  int n = 0;
  for (int rank = 0; rank < ex.p; ++rank) {
    for (const auto& s : steps[rank]) {
      const double stall = absl::ToDoubleMilliseconds(s.stall);
      r.stall_ms += stall;
      r.max_stall_ms = std::max(r.max_stall_ms, stall);
      r.snapshot_ms += absl::ToDoubleMilliseconds(s.snapshot);
      r.waited_ms += absl::ToDoubleMilliseconds(s.waited);
      r.waits += s.waited > absl::Microseconds(100);
      ++n;
    }
  }
  if (n > 0) {
    r.stall_ms /= n;
    r.snapshot_ms /= n;
    r.waited_ms /= n;
  }
  r.checkpoints = n / ex.p;
  // The size of what was saved: the files of the last complete checkpoint.
  uintmax_t bytes = 0;
  std::error_code ec;
  if (mode != Mode::kNone) {
    auto point = worker::LatestCompleteCheckpoint(dir / ex.name);
    if (point.ok() && point->has_value()) {
      for (const auto& e : fs::directory_iterator((*point)->dir, ec)) bytes += e.file_size(ec);
    }
  }
  r.state_mb = static_cast<double>(bytes) / 1e6 / ex.p;
  fs::remove_all(dir, ec);
  return r;
}

std::string LoadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  char buf[64] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  size_t pos = 0;
  for (int k = 0; k < 3 && pos != std::string::npos; ++k) pos = s.find(' ', pos + 1);
  return absl::StrCat(s.substr(0, pos), " (", std::thread::hardware_concurrency(), " cores)");
}

void Main() {
  std::vector<Example> examples;
  {
    Example e;  // examples/gpt-zbv.yaml
    e.name = "gpt-zbv";
    e.note = "examples/gpt-zbv.yaml (GPT 8x64, AdamW)";
    e.p = 4;
    e.m = 8;
    e.microbatch_size = 4;
    e.gpt = true;
    e.gpt_config = {.layers = 8, .hidden = 64, .heads = 4, .seq_len = 32, .vocab = 128};
    examples.push_back(e);
  }
  {
    Example e;  // examples/synthetic-p8.yaml
    e.name = "synthetic-p8";
    e.note = "examples/synthetic-p8.yaml (no parameters)";
    e.p = 8;
    e.m = 16;
    e.f_ms = e.b_ms = e.w_ms = 20;
    e.activation_kb = 64;
    examples.push_back(e);
    e.name = "synthetic-p8-32mb";
    e.note = "the same with params_mb: 32 per rank (AdamW: 96 MB of state per rank)";
    e.params_mb = 32;
    examples.push_back(e);
  }
  std::printf(
      "== checkpoint stall: time the training loop is held at the iteration boundary by a\n"
      "   checkpoint, every %d iterations, %d measured iterations after 1 warm-up; ranks are\n"
      "   threads of one process (TCP streams on loopback), files in %s\n",
      g_every, g_iters, fs::temp_directory_path().c_str());
  std::printf(
      "   sync: the whole save in the loop (before issue 12); async: copy to host memory in "
      "the loop, write in the background\n");
  std::printf("   load average at start: %s\n\n", LoadAverage().c_str());
  for (const Example& ex : examples) std::printf("   %-18s %s\n", ex.name.c_str(), ex.note.c_str());
  std::printf("\n%-18s %6s %9s %9s %9s | %9s %7s | %9s %7s %9s %8s %7s %6s\n", "example", "MB/rk",
              "iter ms", "iter sync", "iter asyn", "sync stl", "% iter", "async stl", "% iter",
              "max stl", "copy ms", "wait ms", "waits");
  for (const Example& ex : examples) {
    if (!g_only.empty() && ex.name != g_only) continue;
    const Result none = Run(ex, Mode::kNone);
    const Result sync = Run(ex, Mode::kSync);
    const Result async = Run(ex, Mode::kAsync);
    std::printf(
        "%-18s %6.2f %9.1f %9.1f %9.1f | %9.2f %6.2f%% | %9.3f %6.2f%% %9.3f %8.3f %7.3f "
        "%3d/%-2d\n",
        ex.name.c_str(), async.state_mb, none.iter_ms, sync.iter_ms, async.iter_ms, sync.stall_ms,
        100 * sync.stall_ms / none.iter_ms, async.stall_ms, 100 * async.stall_ms / none.iter_ms,
        async.max_stall_ms, async.snapshot_ms, async.waited_ms, async.waits,
        async.checkpoints * ex.p);
    std::fflush(stdout);
  }
  std::printf(
      "\n   MB/rk: checkpoint files per rank; iter ms: slowest rank's iteration without / with "
      "sync / with async checkpoints;\n   stl: mean stall per checkpoint per rank (max stl: "
      "the worst one); copy/wait: async stall split into the host copy and the wait\n"
      "   for the previous write; waits: checkpoints (x ranks) that found the previous "
      "write still running. Goal: async stall < 5%% of an iteration.\n");
}

}  // namespace
}  // namespace zpipe::bench

int main(int argc, char** argv) {
  namespace bench = zpipe::bench;
  std::unique_ptr<CLI::App> app = zpipe::flags::NewApp(
      "zpipe_checkpoint_bench", "zpipe_checkpoint_bench [--iters N] [--every K] [--only NAME]",
      "  the stall synchronous and asynchronous checkpoints add to an iteration");
  zpipe::flags::AddInteger(*app, "--iters", &bench::g_iters, 2, std::numeric_limits<int>::max(),
                           "iterations per run (at least 2)");
  zpipe::flags::AddInteger(*app, "--every", &bench::g_every, 1, std::numeric_limits<int>::max(),
                           "a checkpoint every K iterations");
  zpipe::flags::AddText(*app, "--only", &bench::g_only, "NAME", "only this example");
  if (std::optional<int> exit =
          zpipe::flags::ParseMain(*app, zpipe::flags::Args(argc, argv), std::cout, std::cerr)) {
    return *exit;
  }
  bench::Main();
  return 0;
}
