// Runtime benchmarks (scripts/bench runtime): the plan executor against the simulator.
//
//   fidelity  synthetic stages, p = 4 and 8, m = 4p, ZB-V and 1F1B: measured iteration time and
//             bubble rate beside the simulator's prediction for the same costs.
//   overlap   ZB-V, d = 2, synthetic stages with large parameters: reduce overlap and exposed
//             reduce time with bucket overlap on and off (beside the simulator's prediction).
//   gpt       real GPT stages: tokens/s of p = 2 ZB-V (two threads, one intra-op thread each)
//             against the single-process reference model with two intra-op threads.
//
// Every pipeline/data rank is a thread of this process talking over loopback (as in
// worker/executor/executor_test.cc), on ZeroPipe's TCP streams. Synthetic stages only
// sleep, so threads are faithful for them; the GPT comparison pins each thread to one intra-op
// thread.
//
//   bubble    synthetic 5 and 20 ms actions, m = 16, p = 2 and 4, ZB-V, ZB-2p and 1F1B: measured
//             bubble and iteration time beside the simulator's.
//   reporting ZB-V with the daemon's progress reporting and metrics on and off.
//   recompute ZB-1p, p = 4, m = 8, synthetic 5 and 20 ms actions, under a memory limit of two
//             microbatches' activations: the best keep-everything plan against the plan that
//             recomputes (core/recompute.h), predicted and measured iteration time.
//   hop       per-hop cost between two processes: TCP floor, communicator, executor
//             (bench/runtime_hop.h).
//
// Usage: zpipe_runtime_bench [hop|bubble|reporting|fidelity|overlap|gpt|recompute|all] [--iters N] [--warmup
// N]
//                            [--hop-rounds N] [--overlap-p N] [--gpt-iters N]
//                            [--gpt layers,hidden,heads,seq_len,vocab]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/machine_state.h"
#include "bench/runtime_hop.h"
#include "core/cost_model.h"
#include "core/grad_sync.h"
#include "core/planning.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "flags/flags.h"
#include "worker/comm/tcp_communicator.h"
#ifdef ZPIPE_BENCH_WITH_DAEMON
#include <prometheus/registry.h>

#include "worker/daemon/progress_reporter.h"
#include "worker/daemon/worker_metrics.h"
#endif
#include "worker/comm/key_value_store.h"
#include "worker/executor/executor.h"
#include "worker/executor/grad_sync_driver.h"
#include "worker/model/data.h"
#include "worker/model/gpt.h"
#include "worker/model/synthetic.h"

namespace zpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using worker::Executor;
using worker::ExecutorConfig;
using worker::IterationSummary;

int g_iters = 5;   // measured iterations
int g_warmup = 2;  // iterations run first and not measured
// Overlap benchmark pipeline size (--overlap-p N); d = 2, m = 4p.
int g_overlap_p = 2;
// GPT runs are CPU-bound and slow on 2 cores: fewer iterations (--gpt-iters N).
int g_gpt_iters = 3;
int g_gpt_warmup = 1;
// GPT shape for the tokens/s comparison (--gpt layers,hidden,heads,seq_len,vocab).
worker::model::GptConfig g_gpt{.layers = 4, .hidden = 128, .heads = 4, .seq_len = 32, .vocab = 256};

[[noreturn]] void Die(const absl::Status& st, const std::string& what) {
  std::fprintf(stderr, "runtime_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(v.status(), what);
  return *std::move(v);
}

// Waits until start + ms: sleeps until `spin_us` before the end, then spins. spin_us = 0 is the
// synthetic stage's own sleep_until timing.
void WaitUntil(Clock::time_point start, double ms, double spin_us) {
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double, std::milli>(ms));
  const auto wake = end - std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double, std::micro>(spin_us));
  if (Clock::now() < wake) std::this_thread::sleep_until(wake);
  while (Clock::now() < end) std::this_thread::yield();
}

// A synthetic stage whose durations are kept here: the wrapped stage does the real work with
// zero durations, and each action then waits out its configured time (sleep + final spin).
class TimedStage final : public worker::model::Stage {
 public:
  TimedStage(std::unique_ptr<worker::model::Stage> inner, double f_ms, double b_ms, double w_ms,
             double spin_us)
      : inner_(std::move(inner)), f_(f_ms), b_(b_ms), w_(w_ms), spin_(spin_us) {}
  int stage() const override { return inner_->stage(); }
  int num_stages() const override { return inner_->num_stages(); }
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor* targets) override {
    const auto t0 = Clock::now();
    auto out = inner_->Forward(mb, input, targets);
    WaitUntil(t0, f_, spin_);
    return out;
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad) override {
    const auto t0 = Clock::now();
    auto out = inner_->BackwardInput(mb, grad);
    WaitUntil(t0, b_, spin_);
    return out;
  }
  absl::Status BackwardWeight(int mb) override {
    const auto t0 = Clock::now();
    absl::Status st = inner_->BackwardWeight(mb);
    WaitUntil(t0, w_, spin_);
    return st;
  }
  absl::StatusOr<float> Loss(int mb) const override { return inner_->Loss(mb); }
  void ClearLosses() override { inner_->ClearLosses(); }
  void FreeMicrobatch(int mb) override { inner_->FreeMicrobatch(mb); }
  int pending_microbatches() const override { return inner_->pending_microbatches(); }
  const std::vector<worker::model::ParamInfo>& params() const override { return inner_->params(); }
  worker::model::TensorSpec InputSpec(int b) const override { return inner_->InputSpec(b); }
  worker::model::TensorSpec OutputSpec(int b) const override { return inner_->OutputSpec(b); }
  void SetTraining(bool training) override { inner_->SetTraining(training); }

 private:
  std::unique_ptr<worker::model::Stage> inner_;
  double f_, b_, w_, spin_;
};

struct SynthCosts {
  double f_ms = 4, b_ms = 4, w_ms = 3;  // per stage (one op)
  double activation_kb = 64;
  double params_mb = 0;
  int param_tensors = 0;  // 0: one per 4 MB
  double spin_us = 0;     // 0: the synthetic stage's plain sleep_until
};

struct RunSpec {
  core::ScheduleKind kind = core::ScheduleKind::kZbV;
  int p = 4;
  int m = 16;
  int d = 1;
  bool overlap = true;
  int64_t bucket_bytes = int64_t{4} << 20;
  SynthCosts costs;
  int gpt_threads = 0;  // > 0: GPT stages with this many intra-op threads per rank
  worker::model::GptConfig gpt;
  int microbatch_size = 1;
  // Progress reporting, metrics and timeline capture as the worker daemon runs them (only where
  // the bench is built with the daemon library).
  bool reporting = false;
};

#ifdef ZPIPE_BENCH_WITH_DAEMON
// The daemon's per-rank reporting: a ProgressReporter (the executor's ActionSink, the events the
// coordinator builds the live view and the executed timeline from) whose messages are serialized
// as the gRPC stream would, and the worker's Prometheus metrics updated every iteration. The sink
// calls are timed, so the table can give their cost beside the on/off difference.
class TimedReporting final : public worker::ActionSink {
 public:
  explicit TimedReporting(int rank)
      : reporter_("bench", rank, 0,
                  [this](const zpipe::v1::WorkerMessage& m) {
                    bytes_ += m.SerializeAsString().size();
                    return true;
                  }),
        metrics_(worker::NewPrometheusWorkerMetrics(std::make_shared<prometheus::Registry>(),
                                                    "bench", absl::Minutes(1))),
        rank_(rank) {}
  void OnAction(const worker::ActionRecord& r) override {
    const auto t0 = Clock::now();
    reporter_.OnAction(r);
    sink_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  void OnIteration(const IterationSummary& s) {
    const auto t0 = Clock::now();
    metrics_->OnIteration("bench", rank_, 0, s);
    sink_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  double sink_s() const { return sink_s_; }

 private:
  worker::ProgressReporter reporter_;
  std::unique_ptr<worker::WorkerMetrics> metrics_;
  int rank_;
  size_t bytes_ = 0;
  double sink_s_ = 0;
};
#endif

core::CostModel SynthCostModel(const RunSpec& r, double comm_ms) {
  const core::Placement placement = core::PlacementFor(r.kind, r.p);
  core::StageCost c;
  c.f = r.costs.f_ms;
  c.b = r.costs.b_ms;
  c.w = r.costs.w_ms;
  return core::CostModel::Uniform(placement.num_stages(), c, comm_ms);
}

core::Plan MakePlan(const RunSpec& r, double comm_ms) {
  core::PlanRequest req;
  req.schedule = std::string(core::ScheduleName(r.kind));
  req.pipeline = r.p;
  req.microbatches = r.m;
  req.inputs = [&](const core::Placement&) {
    return core::PlanInputs{.cost = SynthCostModel(r, comm_ms)};
  };
  return Must(core::PlanSchedule(req), "plan").plan;
}

// summaries[it][g] for the measured iterations (g = data_rank * p + pipeline_rank), plus the
// wall time of the measured iterations as seen by the slowest rank.
struct RunResult {
  std::vector<std::vector<IterationSummary>> summaries;
  double wall_s = 0;
  std::vector<double> sink_s;  // per rank: time in the reporting calls, measured iterations
  // timings[it][g][k]: when action k of rank g's plan ran in measured iteration `it` (ms on the
  // executors' common clock): compute actions, and sends and receives from posting to completion
  // as the executor saw it; zero for reductions.
  std::vector<std::vector<std::vector<core::ActionTiming>>> timings;
};

// Keeps when each compute action ran (and when each send and receive was posted and seen over),
// by its index in the rank's plan, and passes the record on to `next` (the reporting, when on).
class TimingRecorder final : public worker::ActionSink {
 public:
  TimingRecorder(const std::vector<core::Action>& actions, worker::ActionSink* next,
                 std::vector<std::vector<std::vector<core::ActionTiming>>>* timings, int g)
      : next_(next), timings_(timings), g_(g), size_(actions.size()) {
    for (size_t k = 0; k < actions.size(); ++k) {
      const core::Action& a = actions[k];
      if (core::IsCompute(a.kind) || core::IsComm(a.kind)) {
        index_[{static_cast<int>(a.kind), a.stage, a.microbatch}] = k;
      }
    }
  }
  void OnAction(const worker::ActionRecord& r) override {
    if (next_ != nullptr) next_->OnAction(r);
    const int it = r.iteration - g_warmup;
    if (it < 0 || it >= static_cast<int>(timings_->size())) return;
    const auto found =
        index_.find({static_cast<int>(r.action.kind), r.action.stage, r.action.microbatch});
    if (found == index_.end()) return;
    std::vector<core::ActionTiming>& row = (*timings_)[it][g_];
    row.resize(size_);
    row[found->second] = {r.start_s * 1e3, r.end_s * 1e3};  // ms, the cost model's unit here
  }

 private:
  worker::ActionSink* next_;
  std::vector<std::vector<std::vector<core::ActionTiming>>>* timings_;
  int g_;
  size_t size_;
  std::map<std::tuple<int, int, int>, size_t> index_;
};

int g_run_id = 0;

RunResult RunPipeline(const RunSpec& r, const core::Plan& plan) {
  const core::Placement& placement = plan.placement;
  const int n = r.p * r.d;
  auto store = worker::NewInMemoryStore();
  const std::string prefix = absl::StrCat("rtbench/", g_run_id++, "/");
  std::vector<absl::Status> errors(n);
  RunResult result;
  result.summaries.assign(g_iters, std::vector<IterationSummary>(n));
  result.sink_s.assign(n, 0);
  result.timings.assign(g_iters, std::vector<std::vector<core::ActionTiming>>(n));
  std::vector<Clock::time_point> t0(n), t1(n);
  std::unique_ptr<worker::model::SyntheticTokenData> data;
  if (r.gpt_threads > 0) {
    data = std::make_unique<worker::model::SyntheticTokenData>(Must(
        worker::model::SyntheticTokenData::Make(1, r.gpt.vocab, r.gpt.seq_len, r.microbatch_size),
        "data"));
  }
  std::vector<std::thread> threads;
  for (int g = 0; g < n; ++g) {
    threads.emplace_back([&, g] {
      const int rank = g % r.p, dr = g / r.p;
      auto fail = [&](absl::Status st) { errors[g] = st; };
      if (r.gpt_threads > 0) torch::set_num_threads(r.gpt_threads);
      worker::CommunicatorOptions opts;
      opts.pipeline_rank = rank;
      opts.pipeline_size = r.p;
      opts.data_rank = dr;
      opts.data_size = r.d;
      opts.key_prefix = prefix;
      opts.timeout = absl::Seconds(60);
      auto comm = worker::NewTcpCommunicator(opts, *store);
      if (!comm.ok()) return fail(comm.status());
      std::vector<std::unique_ptr<worker::model::Stage>> stages;
      for (int c = 0; c < placement.chunks_per_rank(); ++c) {
        worker::model::StageOptions so;
        so.stage = placement.StageOf(rank, c);
        so.num_stages = placement.num_stages();
        so.num_microbatches = r.m;
        so.seed = 1;
        if (r.gpt_threads > 0) {
          auto st = worker::model::MakeGptStage(r.gpt, so);
          if (!st.ok()) return fail(st.status());
          stages.push_back(*std::move(st));
          continue;
        }
        worker::model::SyntheticStageConfig sc;
        sc.activation_kb = r.costs.activation_kb;
        sc.params_mb = r.costs.params_mb;
        sc.param_tensors = r.costs.param_tensors;
        if (r.costs.spin_us > 0) {
          auto st = worker::model::MakeSyntheticStage(sc, so);
          if (!st.ok()) return fail(st.status());
          stages.push_back(std::make_unique<TimedStage>(*std::move(st), r.costs.f_ms, r.costs.b_ms,
                                                        r.costs.w_ms, r.costs.spin_us));
        } else {
          sc.forward_ms = r.costs.f_ms;
          sc.backward_ms = r.costs.b_ms;
          sc.weight_ms = r.costs.w_ms;
          auto st = worker::model::MakeSyntheticStage(sc, so);
          if (!st.ok()) return fail(st.status());
          stages.push_back(*std::move(st));
        }
      }
      std::unique_ptr<worker::GradSyncDriver> driver;
      if (r.d > 1) {
        worker::GradSyncOptions gso;
        gso.overlap = r.overlap;
        gso.bucket_bytes = r.bucket_bytes;
        auto drv = worker::NewGradSyncDriver(plan, rank, stages, gso, **comm);
        if (!drv.ok()) return fail(drv.status());
        driver = *std::move(drv);
      }
      ExecutorConfig config;
      config.microbatch_size = r.microbatch_size;
      config.timeout = absl::Seconds(60);
      config.optimizer = r.gpt_threads > 0 ? worker::Optimizer::kAdamW : worker::Optimizer::kSgd;
      config.max_grad_norm = r.gpt_threads > 0 ? 1.0 : 0;
      worker::ActionSink* sink = nullptr;
#ifdef ZPIPE_BENCH_WITH_DAEMON
      std::unique_ptr<TimedReporting> reporting;
      if (r.reporting) {
        reporting = std::make_unique<TimedReporting>(rank);
        sink = reporting.get();
      }
#endif
      TimingRecorder recorder(plan.ranks[rank], sink, &result.timings, g);
      sink = &recorder;
      auto exec = Executor::Make(plan, rank, dr, config, std::move(stages), **comm, data.get(),
                                 driver.get(), sink);
      if (!exec.ok()) return fail(exec.status());
      double warm_sink_s = 0;  // reporting cost of the warm-up iterations, left out
      for (int it = 0; it < g_warmup + g_iters; ++it) {
        if (it == g_warmup) t0[g] = Clock::now();
#ifdef ZPIPE_BENCH_WITH_DAEMON
        if (it == g_warmup && reporting != nullptr) warm_sink_s = reporting->sink_s();
#endif
        auto s = (*exec)->RunIteration(it);
        if (!s.ok()) return fail(s.status());
#ifdef ZPIPE_BENCH_WITH_DAEMON
        if (reporting != nullptr) reporting->OnIteration(*s);
#endif
        if (it >= g_warmup) result.summaries[it - g_warmup][g] = *s;
      }
      t1[g] = Clock::now();
#ifdef ZPIPE_BENCH_WITH_DAEMON
      if (reporting != nullptr) result.sink_s[g] = reporting->sink_s() - warm_sink_s;
#endif
      (void)warm_sink_s;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& st : errors) {
    if (!st.ok()) Die(st, "pipeline run");
  }
  result.wall_s = std::chrono::duration<double>(*std::max_element(t1.begin(), t1.end()) -
                                                *std::min_element(t0.begin(), t0.end()))
                      .count();
  return result;
}

// One-way latency of an activation-sized send between two threads: the median round trip
// of a ping-pong, halved (a median, so one preempted round does not move the prediction).
double MeasureCommMs(double activation_kb) {
  auto store = worker::NewInMemoryStore();
  const int64_t floats = static_cast<int64_t>(activation_kb * 256);
  constexpr int kRounds = 100, kWarmup = 10;
  std::vector<double> round_trip_ms;
  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      worker::CommunicatorOptions opts;
      opts.pipeline_rank = rank;
      opts.pipeline_size = 2;
      opts.key_prefix = "rtbench/pingpong/";
      auto comm = worker::NewTcpCommunicator(opts, *store);
      if (!comm.ok()) {
        errors[rank] = comm.status();
        return;
      }
      torch::Tensor in = torch::zeros({floats}), in2 = torch::zeros({floats}),
                    out = torch::zeros({floats});
      std::unique_ptr<worker::CommHandle> recv, next;
      if (rank == 1) recv = (*comm)->Recv(in, 0, 0);
      for (int k = 0; k < kWarmup + kRounds; ++k) {
        // Receives are posted before the matching send, as the executor posts them ahead.
        if (rank == 0) {
          const auto t0 = Clock::now();
          auto recv = (*comm)->Recv(in, 1, k);
          (*comm)->Send(out, 1, k)->Wait().IgnoreError();
          recv->Wait().IgnoreError();
          if (k >= kWarmup) {
            round_trip_ms.push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
        } else {
          recv->Wait().IgnoreError();
          if (k + 1 < kWarmup + kRounds) next = (*comm)->Recv(in2, 0, k + 1);
          (*comm)->Send(out, 0, k)->Wait().IgnoreError();
          recv = std::move(next);
          std::swap(in, in2);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& st : errors) {
    if (!st.ok()) Die(st, "ping-pong");
  }
  std::nth_element(round_trip_ms.begin(), round_trip_ms.begin() + round_trip_ms.size() / 2,
                   round_trip_ms.end());
  return round_trip_ms[round_trip_ms.size() / 2] / 2;
}

// Span (max over ranks of duration) and bubble (1 - sum busy / (p * span)) of one pipeline
// replica in one iteration.
struct Measured {
  double span_s = 0;
  double bubble = 0;
};

Measured MeasureReplica(const std::vector<IterationSummary>& ranks, int p, int dr) {
  Measured m;
  double busy = 0;
  for (int r = 0; r < p; ++r) {
    const IterationSummary& s = ranks[dr * p + r];
    m.span_s = std::max(m.span_s, s.duration_s);
    busy += s.busy_s;
  }
  m.bubble = 1 - busy / (p * m.span_s);
  return m;
}

void Fidelity() {
  const SynthCosts base;  // per-rank F 8, B 8, W 6 ms; ZB-V halves them per chunk
  const double comm_ms = MeasureCommMs(base.activation_kb);
  std::printf(
      "== 1. fidelity, synthetic stages (per rank F=8 B=8 W=6 ms: 1F1B ops F=8 BW=14, "
      "ZB-V chunk ops F=4 B=4 W=3), activation %.0f KiB\n",
      base.activation_kb);
  std::printf(
      "   measured: max over ranks of iteration duration and 1 - sum busy/(p span), mean "
      "of %d iterations after %d warm-up\n",
      g_iters, g_warmup);
  std::printf(
      "   predicted: core::Simulate of the same lowered plan, same costs, T_comm = %.3f ms "
      "(measured ping-pong / 2)\n",
      comm_ms);
  std::printf(
      "   timing: sleep = sleep_until (synthetic stage as shipped); sleep+spin = sleep until "
      "200 us before the end, then spin (yielding)\n");
  std::printf(
      "   op overrun: mean measured op time minus configured; err@meas-ops: measured time "
      "vs the simulator fed the measured mean op times (what is left: late hand-overs);\n"
      "   fit comm: the T_comm (us) that makes that simulation match the measured time\n");
  std::printf("   machine at start: %s\n\n", MachineState().c_str());
  std::printf("%-6s %3s %3s %-11s %10s %10s %7s %9s %9s %7s %11s %11s %9s\n", "sched", "p", "m",
              "timing", "meas ms", "pred ms", "err %", "meas bub", "pred bub", "dbub", "overrun us",
              "err@meas-ops", "fit comm");
  for (int p : {4, 8}) {
    for (core::ScheduleKind kind : {core::ScheduleKind::k1F1B, core::ScheduleKind::kZbV}) {
      for (double spin : {0.0, 200.0}) {
        RunSpec r;
        r.kind = kind;
        r.p = p;
        r.m = 4 * p;
        r.costs = base;
        r.costs.spin_us = spin;
        const int v = core::PlacementFor(kind, p).chunks_per_rank();
        r.costs.f_ms = 8.0 / v;
        r.costs.b_ms = 8.0 / v;
        r.costs.w_ms = 6.0 / v;
        const core::Plan plan = MakePlan(r, comm_ms);
        const core::SimResult sim =
            Must(core::Simulate(plan, SynthCostModel(r, comm_ms)), "simulate");
        const RunResult run = RunPipeline(r, plan);
        double span = 0, bubble = 0, fwd = 0, bwd = 0, wgt = 0;
        for (const auto& it : run.summaries) {
          const Measured m = MeasureReplica(it, r.p, 0);
          span += m.span_s;
          bubble += m.bubble;
          for (const IterationSummary& s : it) {
            fwd += s.forward_s;
            bwd += s.backward_s;
            wgt += s.weight_s;
          }
        }
        const double iters = run.summaries.size();
        span = span / iters * 1e3;
        bubble /= iters;
        // Mean measured op durations (ms), and the simulator run again with them: separates op
        // overrun (sleep wake-up late) from late hand-overs between ranks.
        const double ops = iters * r.m * plan.num_stages();
        const double ideal_ms = (r.costs.f_ms + r.costs.b_ms + r.costs.w_ms) * ops;
        const double overrun_us = ((fwd + bwd + wgt) * 1e3 - ideal_ms) / (3 * ops) * 1e3;
        RunSpec rm = r;
        rm.costs.f_ms = fwd * 1e3 / ops;
        if (wgt > 0) {
          rm.costs.b_ms = bwd * 1e3 / ops;
          rm.costs.w_ms = wgt * 1e3 / ops;
        } else {  // BW: split the measured time as configured
          const double bw = bwd * 1e3 / ops;
          rm.costs.b_ms = bw * r.costs.b_ms / (r.costs.b_ms + r.costs.w_ms);
          rm.costs.w_ms = bw - rm.costs.b_ms;
        }
        const core::SimResult sim_meas =
            Must(core::Simulate(plan, SynthCostModel(rm, comm_ms)), "simulate");
        // The hand-over latency that would explain the rest: T_comm fitted (bisection) so the
        // simulator with the measured op times reproduces the measured span.
        double lo = 0, hi = 5;  // ms
        for (int k = 0; k < 30; ++k) {
          const double mid = (lo + hi) / 2;
          const core::SimResult s = Must(core::Simulate(plan, SynthCostModel(rm, mid)), "simulate");
          (s.span < span ? lo : hi) = mid;
        }
        const double fit_comm_us = sim_meas.span >= span ? comm_ms * 1e3 : lo * 1e3;
        std::printf(
            "%-6s %3d %3d %-11s %10.1f %10.1f %+7.2f %9.3f %9.3f %+7.3f %11.0f %+11.2f %9.0f\n",
            std::string(core::ScheduleName(kind)).c_str(), p, r.m,
            spin > 0 ? "sleep+spin" : "sleep", span, sim.span, 100 * (span - sim.span) / sim.span,
            bubble, sim.bubble_rate, bubble - sim.bubble_rate, overrun_us,
            100 * (span - sim_meas.span) / sim_meas.span, fit_comm_us);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n");
}

// The bubble the simulator gives the plan when every compute action takes what it measured in
// the run (replica 0, mean over the measured iterations): the run's own compute, with hand-overs
// at exactly T_comm.
double ReplayBubble(const RunSpec& r, const core::Plan& plan, double comm_ms,
                    const RunResult& run) {
  double bubble = 0;
  for (const auto& iteration : run.timings) {
    std::vector<std::vector<double>> durations(r.p);
    for (int rank = 0; rank < r.p; ++rank) {
      for (const core::ActionTiming& t : iteration[rank])
        durations[rank].push_back(t.end - t.start);
    }
    core::SimOptions options;
    options.action_durations = &durations;
    bubble += Must(core::Simulate(plan, SynthCostModel(r, comm_ms), options), "replay").bubble_rate;
  }
  return bubble / run.timings.size();
}

// Hand-over latency inside the pipeline: for every cross-rank dependency (F to the next stage's
// F, B to the previous stage's B) whose consumer sat idle waiting for it, the time from the
// producer's end to the consumer's start (us), over replica 0 and the measured iterations, and
// its two parts: producer's end to the send's completion (the sender's side: queueing, posting,
// the write) and from there to the consumer's start (the receiver's: waking up, bookkeeping).
struct HandOver {
  double p50 = 0, p90 = 0;  // whole hand-over
  double send_p50 = 0, wake_p50 = 0;
};

HandOver MeasureHandOvers(const RunSpec& r, const core::Plan& plan, const RunResult& run) {
  using core::ActionKind;
  const core::Placement& placement = plan.placement;
  std::vector<double> whole, send, wake;
  for (const auto& iteration : run.timings) {
    // (kind, stage, mb) -> timing, over every rank of replica 0.
    std::map<std::tuple<int, int, int>, core::ActionTiming> at;
    for (int rank = 0; rank < r.p; ++rank) {
      for (size_t k = 0; k < plan.ranks[rank].size(); ++k) {
        const core::Action& a = plan.ranks[rank][k];
        const ActionKind kind =
            a.kind == ActionKind::kBackwardFull ? ActionKind::kBackwardInput : a.kind;
        at[{static_cast<int>(kind), a.stage, a.microbatch}] = iteration[rank][k];
      }
    }
    for (int rank = 0; rank < r.p; ++rank) {
      double previous_end = -1;
      for (size_t k = 0; k < plan.ranks[rank].size(); ++k) {
        const core::Action& a = plan.ranks[rank][k];
        if (!core::IsCompute(a.kind)) continue;
        const core::ActionTiming& t = iteration[rank][k];
        const double idle_since = previous_end;
        previous_end = t.end;
        const std::optional<core::Action> input = core::NeighbourInput(a, plan.num_stages());
        if (!input || placement.RankOf(input->stage) == rank || idle_since < 0) continue;
        const ActionKind sent =
            input->kind == ActionKind::kForward ? ActionKind::kSendAct : ActionKind::kSendGrad;
        const auto producer =
            at.find({static_cast<int>(input->kind), input->stage, input->microbatch});
        const auto message = at.find({static_cast<int>(sent), input->stage, input->microbatch});
        if (producer == at.end() || producer->second.end <= idle_since) continue;
        whole.push_back((t.start - producer->second.end) * 1e3);
        if (message != at.end() && message->second.end > 0) {
          send.push_back((message->second.end - producer->second.end) * 1e3);
          wake.push_back((t.start - message->second.end) * 1e3);
        }
      }
    }
  }
  auto quantile = [](std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };
  return {quantile(whole, 0.5), quantile(whole, 0.9), quantile(send, 0.5), quantile(wake, 0.5)};
}

// The issue-14 table: every compute action (F, B, W per chunk; BW = B + W) takes `ms`; m = 16.
// Measured bubble and iteration time beside the simulator's, for the schedules the runtime is
// judged by. One line per (schedule, p, action time).
void Bubble() {
  const double comm_ms = MeasureCommMs(64);
  std::printf(
      "== bubble fidelity: synthetic actions of 5 and 20 ms (F = B = W per chunk, BW = B + W), "
      "m = 16, activation 64 KiB, ranks as threads over loopback on ZeroPipe's TCP streams\n");
  std::printf(
      "   measured: mean over %d iterations after %d warm-up of 1 - sum busy / (p span) and of "
      "the span; predicted: core::Simulate, T_comm = %.3f ms (median ping-pong / 2)\n",
      g_iters, g_warmup, comm_ms);
  std::printf(
      "   replay: core::Simulate fed every action's measured duration (same T_comm); the gap "
      "splits into\n   jitter = replay - pred (actions that ran longer than configured: the "
      "machine) and runtime = meas - replay (hand-overs beyond T_comm, the executor's own time)\n");
  std::printf("   machine at start: %s\n\n", MachineState().c_str());
  std::printf("%-6s %6s %3s %9s %9s %8s %9s %8s %8s %10s %10s %8s %8s %8s %7s %7s\n", "sched",
              "action", "p", "meas bub", "pred bub", "gap", "replay", "jitter", "runtime",
              "meas ms", "pred ms", "err %", "hop p50", "hop p90", "send", "wake");
  for (double ms : {5.0, 20.0}) {
    for (core::ScheduleKind kind :
         {core::ScheduleKind::kZbV, core::ScheduleKind::kZb2p, core::ScheduleKind::k1F1B}) {
      for (int p : {2, 4}) {
        RunSpec r;
        r.kind = kind;
        r.p = p;
        r.m = 16;
        r.costs.f_ms = r.costs.b_ms = r.costs.w_ms = ms;
        r.costs.activation_kb = 64;
        const core::Plan plan = MakePlan(r, comm_ms);
        const core::SimResult sim =
            Must(core::Simulate(plan, SynthCostModel(r, comm_ms)), "simulate");
        const RunResult run = RunPipeline(r, plan);
        double span = 0, bubble = 0;
        for (const auto& it : run.summaries) {
          const Measured m = MeasureReplica(it, r.p, 0);
          span += m.span_s;
          bubble += m.bubble;
        }
        span = span / run.summaries.size() * 1e3;
        bubble /= run.summaries.size();
        const double replay = ReplayBubble(r, plan, comm_ms, run);
        const HandOver hop = MeasureHandOvers(r, plan, run);
        std::printf(
            "%-6s %4.0fms %3d %9.3f %9.3f %+8.3f %9.3f %+8.3f %+8.3f %10.1f %10.1f %+8.2f %8.1f "
            "%8.1f %7.1f %7.1f\n",
            std::string(core::ScheduleName(kind)).c_str(), ms, p, bubble, sim.bubble_rate,
            bubble - sim.bubble_rate, replay, replay - sim.bubble_rate, bubble - replay, span,
            sim.span, 100 * (span - sim.span) / sim.span, hop.p50, hop.p90, hop.send_p50,
            hop.wake_p50);
        std::fflush(stdout);
      }
    }
  }
  std::printf("   machine load average at end: %s\n\n", LoadAverage().c_str());
}

// The mean measured span (ms) of `run`'s iterations, replica 0.
double MeanSpanMs(const RunResult& run, int p) {
  double span = 0;
  for (const auto& it : run.summaries) span += MeasureReplica(it, p, 0).span_s;
  return span / run.summaries.size() * 1e3;
}

// Issue 34: a plan where recomputation wins, and its measured run. ZB-1p at a per-rank limit of
// two microbatches' activations (M_F = 1, M_B = 0, M_W = -1; a recomputed forward keeps 0.1 of
// them, its input), planned keeping everything and with --recompute auto; both run on the
// executor with synthetic stages (R sleeps T_F like F).
void Recompute() {
  const double comm_ms = MeasureCommMs(64);
  constexpr double kLimit = 2;
  std::printf(
      "== recomputation: zb-1p p = 4, m = 8, memory limit %g x M_F per rank (M_keep = 0.1 M_F), "
      "synthetic F = B = W = R, activation 64 KiB, ranks as threads over loopback\n",
      kLimit);
  std::printf("   measured: mean span over %d iterations after %d warm-up; predicted: "
              "core::Simulate, T_comm = %.3f ms\n   machine at start: %s\n\n",
              g_iters, g_warmup, comm_ms, MachineState().c_str());
  std::printf("%-6s %-10s %-9s %10s %10s %9s %9s\n", "action", "plan", "recompute", "pred ms",
              "meas ms", "pred bub", "meas bub");
  for (double ms : {5.0, 20.0}) {
    RunSpec r;
    r.kind = core::ScheduleKind::kZb1p;
    r.p = 4;
    r.m = 8;
    r.costs.f_ms = r.costs.b_ms = r.costs.w_ms = ms;
    r.costs.activation_kb = 64;
    std::map<core::RecomputePolicy, double> measured;
    for (core::RecomputePolicy policy : {core::RecomputePolicy::kOff, core::RecomputePolicy::kAuto}) {
      core::PlanRequest req;
      req.schedule = "zb-1p";
      req.pipeline = r.p;
      req.microbatches = r.m;
      req.memory_limit = kLimit;
      req.recompute = policy;
      req.inputs = [&](const core::Placement&) {
        core::CostModel cost = SynthCostModel(r, comm_ms);
        for (core::StageCost& c : cost.stages) {
          c.mem_f = 1;
          c.mem_b = 0;
          c.mem_w = -1;
          c.mem_keep = 0.1;
        }
        return core::PlanInputs{.cost = cost};
      };
      const core::PlannedSchedule planned = Must(core::PlanSchedule(req), "plan");
      const RunResult run = RunPipeline(r, planned.plan);
      double bubble = 0;
      for (const auto& it : run.summaries) bubble += MeasureReplica(it, r.p, 0).bubble;
      bubble /= run.summaries.size();
      std::string stages;
      for (size_t s = 0; s < planned.recompute_stages.size(); ++s) {
        if (planned.recompute_stages[s]) absl::StrAppend(&stages, stages.empty() ? "" : ",", s);
      }
      measured[policy] = MeanSpanMs(run, r.p);
      std::printf("%4.0fms %-10s %-9s %10.1f %10.1f %9.3f %9.3f\n", ms,
                  policy == core::RecomputePolicy::kOff ? "keep" : "recompute",
                  stages.empty() ? "none" : stages.c_str(), planned.sim.span, measured[policy],
                  planned.sim.bubble_rate, bubble);
      std::fflush(stdout);
    }
    std::printf("       measured: recomputation %.1f%% shorter\n",
                100 * (1 - measured[core::RecomputePolicy::kAuto] /
                               measured[core::RecomputePolicy::kOff]));
  }
  std::printf("   machine load average at end: %s\n\n", LoadAverage().c_str());
}

// Progress reporting, metrics and timeline capture on and off: iteration time both ways, and
// the time the executor's thread spent in the reporting calls, per iteration.
void Reporting() {
#ifdef ZPIPE_BENCH_WITH_DAEMON
  std::printf(
      "== reporting overhead: ZB-V m = 16, 5 ms actions; on = the daemon's ProgressReporter "
      "(messages serialized) + worker Prometheus metrics; mean of %d iterations after %d\n",
      g_iters, g_warmup);
  std::printf("   machine at start: %s\n\n", MachineState().c_str());
  std::printf("%3s %11s %11s %8s %15s %10s\n", "p", "off ms", "on ms", "diff %", "calls us/iter",
              "calls %");
  for (int p : {2, 4}) {
    RunSpec r;
    r.kind = core::ScheduleKind::kZbV;
    r.p = p;
    r.m = 16;
    r.costs.f_ms = r.costs.b_ms = r.costs.w_ms = 5;
    const core::Plan plan = MakePlan(r, 0.05);
    double ms[2] = {0, 0}, calls_s = 0;
    // Alternating off/on runs, so drift in the machine's load hits both alike.
    for (int rep = 0; rep < 2; ++rep) {
      for (int on = 0; on < 2; ++on) {
        r.reporting = on == 1;
        const RunResult run = RunPipeline(r, plan);
        for (const auto& it : run.summaries) ms[on] += MeasureReplica(it, r.p, 0).span_s * 1e3;
        if (on == 1) {
          for (double v : run.sink_s) calls_s += v / r.p;  // per rank
        }
      }
    }
    const double iters = 2.0 * g_iters;
    const double off = ms[0] / iters, on = ms[1] / iters, calls_us = calls_s / iters * 1e6;
    std::printf("%3d %11.1f %11.1f %+8.2f %15.1f %9.3f%%\n", p, off, on, 100 * (on - off) / off,
                calls_us, 100 * calls_us / (on * 1e3));
    std::fflush(stdout);
  }
  std::printf("   machine load average at end: %s\n\n", LoadAverage().c_str());
#else
  std::printf("== reporting overhead: needs the worker daemon library (a build with proto/)\n\n");
#endif
}

void Overlap() {
  RunSpec r;
  r.kind = core::ScheduleKind::kZbV;
  r.p = g_overlap_p;
  r.m = 4 * r.p;
  r.d = 2;
  r.costs.f_ms = 6;
  r.costs.b_ms = 6;
  r.costs.w_ms = 5;
  // The synthetic stage's own timing (not TimedStage), so W paces its tensors' landings.
  r.costs.spin_us = 0;
  // 12 tensors of 1 MB per stage, one per bucket: W lands them (and so launches the buckets) one
  // by one, last layer first.
  r.costs.params_mb = 12;
  r.costs.param_tensors = 12;
  r.bucket_bytes = int64_t{1} << 20;
  const int buckets = r.costs.param_tensors;
  const double comm_ms = MeasureCommMs(r.costs.activation_kb);
  const core::Plan plan = MakePlan(r, comm_ms);
  std::printf(
      "== 2. gradient-reduce overlap: ZB-V p=%d m=%d d=%d, chunk ops F=%.0f B=%.0f W=%.0f "
      "ms, %.0f MB of parameters per stage in %d buckets of 1 MB (all-reduce on the TCP streams)\n",
      r.p, r.m, r.d, r.costs.f_ms, r.costs.b_ms, r.costs.w_ms, r.costs.params_mb, buckets);
  std::printf(
      "   measured: per rank per iteration, summed over the p·d ranks, mean of %d "
      "iterations; overlap = 1 - exposed / total reduce time\n",
      g_iters);
  std::printf(
      "   predicted: core::PlanGradSync + Simulate with reduce_cost = the measured mean "
      "bucket all-reduce time\n\n");
  std::printf("%-8s %10s %11s %12s %9s %9s %10s %10s\n", "overlap", "iter ms", "reduce ms",
              "exposed ms", "overlap", "pred ovl", "pred iter", "no-DP sim");
  const core::SimResult nodp = Must(core::Simulate(plan, SynthCostModel(r, comm_ms)), "simulate");
  for (bool on : {true, false}) {
    r.overlap = on;
    const RunResult run = RunPipeline(r, plan);
    double iter_ms = 0, reduce = 0, exposed = 0;
    int nreduce = 0;
    for (const auto& it : run.summaries) {
      double span = 0;
      for (const IterationSummary& s : it) {
        span = std::max(span, s.duration_s);
        reduce += s.reduce_s;
        exposed += s.exposed_reduce_s;
        nreduce += static_cast<int>(s.reductions.size());
      }
      iter_ms += span * 1e3;
    }
    const double iters = run.summaries.size();
    const double per_bucket_ms = nreduce > 0 ? reduce / nreduce * 1e3 : 0;
    core::GradSyncLayout layout = core::GradSyncLayout::Uniform(plan.num_stages(), buckets);
    const core::GradSyncPlan gplan = Must(core::PlanGradSync(plan, layout, on), "grad sync plan");
    core::SimOptions so;
    so.reduce_cost = per_bucket_ms;
    so.release_during_w = on;
    const core::SimResult sim =
        Must(core::Simulate(gplan.plan, SynthCostModel(r, comm_ms), so), "simulate");
    // Totals per iteration over all p*d ranks (the simulator's are over the p ranks of one
    // replica; both replicas reduce the same buckets, so its overlap ratio is comparable).
    std::printf("%-8s %10.1f %11.1f %12.1f %8.1f%% %8.1f%% %10.1f %10.1f\n", on ? "on" : "off",
                iter_ms / iters, reduce / iters * 1e3, exposed / iters * 1e3,
                reduce > 0 ? 100 * (1 - exposed / reduce) : 0.0, 100 * sim.reduce_overlap, sim.span,
                nodp.span);
    std::fflush(stdout);
  }
  std::printf("\n");
}

void Gpt() {
  g_iters = g_gpt_iters;  // RunPipeline reads the globals
  g_warmup = g_gpt_warmup;
  const worker::model::GptConfig gpt = g_gpt;
  const int m = 8, mbs = 4;
  const double tokens_per_iter = double(m) * mbs * gpt.seq_len;
  std::printf(
      "== 3. real GPT (layers %d, hidden %d, heads %d, seq %d, vocab %d), global batch "
      "%d x %d samples = %.0f tokens/iteration, AdamW, mean of %d iterations after %d "
      "warm-up\n\n",
      gpt.layers, gpt.hidden, gpt.heads, gpt.seq_len, gpt.vocab, m, mbs, tokens_per_iter, g_iters,
      g_warmup);
  std::fflush(stdout);
  // Reference: one process, 2 intra-op threads, same microbatches accumulated, same optimizer.
  double ref_s = 0, ref_full_s = 0, ref_one_s = 0;
  {
    auto ref = Must(worker::model::GptReference::Make(gpt, 1), "reference");
    auto data =
        Must(worker::model::SyntheticTokenData::Make(1, gpt.vocab, gpt.seq_len, mbs), "data");
    auto params = ref->parameters();
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
    // 0: microbatch by microbatch, 1: global batch at once, 2: as 0 with one intra-op thread.
    for (int pass = 0; pass < 3; ++pass) {
      torch::set_num_threads(pass == 2 ? 1 : 2);
      Clock::time_point start;
      for (int it = 0; it < g_warmup + g_iters; ++it) {
        if (it == g_warmup) start = Clock::now();
        opt.zero_grad();
        if (pass != 1) {
          for (int i = 0; i < m; ++i) {
            worker::model::TokenBatch b = data.Microbatch(it, 0, i);
            auto loss = Must(ref->Loss(b.tokens, b.targets), "loss");
            (loss / m).backward();
          }
        } else {
          worker::model::TokenBatch b = data.GlobalBatch(it, 1, m);
          Must(ref->Loss(b.tokens, b.targets), "loss").backward();
        }
        torch::nn::utils::clip_grad_norm_(params, 1.0);
        opt.step();
      }
      const double s = std::chrono::duration<double>(Clock::now() - start).count() / g_iters;
      (pass == 0 ? ref_s : pass == 1 ? ref_full_s : ref_one_s) = s;
      std::fprintf(stderr, "  reference pass %d: %.3f s/iter\n", pass, s);
    }
  }
  RunSpec r;
  r.kind = core::ScheduleKind::kZbV;
  r.p = 2;
  r.m = m;
  r.gpt_threads = 1;
  r.gpt = gpt;
  r.microbatch_size = mbs;
  core::PlanRequest req;
  req.schedule = std::string(core::ScheduleName(r.kind));
  req.pipeline = r.p;
  req.microbatches = r.m;
  req.inputs = [](const core::Placement& placement) {
    return core::UniformInputs(placement, core::StageCost{});
  };
  const core::Plan plan = Must(core::PlanSchedule(req), "plan").plan;
  const RunResult run = RunPipeline(r, plan);
  double bubble = 0;
  for (const auto& it : run.summaries) bubble += MeasureReplica(it, r.p, 0).bubble;
  bubble /= run.summaries.size();
  const double pipe_s = run.wall_s / g_iters;
  std::printf("%-44s %8s %11s %9s\n", "run", "s/iter", "tokens/s", "vs ref");
  std::printf("%-44s %8.3f %11.0f %9.2f\n", "reference, 1 process, 2 threads, microbatched", ref_s,
              tokens_per_iter / ref_s, 1.0);
  std::printf("%-44s %8.3f %11.0f %9.2f\n", "reference, 1 process, 2 threads, whole batch",
              ref_full_s, tokens_per_iter / ref_full_s, ref_s / ref_full_s);
  std::printf("%-44s %8.3f %11.0f %9.2f\n", "reference, 1 process, 1 thread, microbatched",
              ref_one_s, tokens_per_iter / ref_one_s, ref_s / ref_one_s);
  std::printf("%-44s %8.3f %11.0f %9.2f\n", "ZB-V p=2 m=8, 2 ranks x 1 thread (TCP)", pipe_s,
              tokens_per_iter / pipe_s, ref_s / pipe_s);
  std::printf(
      "   ZB-V measured bubble %.3f (1 - sum busy / (p span)); vs ref = reference "
      "(2 threads, microbatched) s/iter / this s/iter; load average now %s\n\n",
      bubble, LoadAverage().c_str());
}

}  // namespace
}  // namespace zpipe::bench

int main(int argc, char** argv) {
  using namespace zpipe::bench;
  std::string what = "all";
  int hop_rounds = 400;
  if (argc == 4 && std::string(argv[1]) == "hop-peer") {
    return RunHopPeer(argv[2], std::atoi(argv[3]));
  }
  std::unique_ptr<CLI::App> app = zpipe::flags::NewApp(
      "zpipe_runtime_bench",
      "zpipe_runtime_bench [hop|bubble|reporting|fidelity|overlap|gpt|recompute|all] [--iters N] "
      "[--warmup N] [--hop-rounds N] [--overlap-p N] [--gpt-iters N] [--gpt L,H,heads,T,V]",
      "  the executor's runtime on this machine: hand-over latency, measured bubble, reporting\n"
      "  cost, fidelity to the simulator, reduce overlap, a GPT (default: all of them)");
  // Each count has a floor; a smaller one is raised to it.
  auto at_least = [&](const char* name, int* out, int floor, const char* help) {
    zpipe::flags::AddChecked(*app, name, "N", help, zpipe::flags::IntegerIn(INT32_MIN, INT32_MAX),
                             [out, floor](const std::string& v) {
                               *out =
                                   std::max(floor, static_cast<int>(zpipe::flags::IntegerValue(v)));
                             });
  };
  at_least("--hop-rounds", &hop_rounds, 20, "hand-over rounds (default 400, at least 20)");
  at_least("--iters", &g_iters, 1, "measured iterations");
  at_least("--warmup", &g_warmup, 0, "iterations before measuring");
  at_least("--overlap-p", &g_overlap_p, 2, "pipeline stages of the overlap run (at least 2)");
  at_least("--gpt-iters", &g_gpt_iters, 1, "iterations of the GPT run");
  zpipe::flags::AddChecked(
      *app, "--gpt", "L,H,heads,T,V", "the GPT's layers,hidden,heads,seq_len,vocab",
      [](const std::string& v) {
        int n[5];
        return std::sscanf(v.c_str(), "%d,%d,%d,%d,%d", &n[0], &n[1], &n[2], &n[3], &n[4]) == 5
                   ? std::string()
                   : "want layers,hidden,heads,seq_len,vocab, got '" + v + "'";
      },
      [](const std::string& v) {
        std::sscanf(v.c_str(), "%d,%d,%d,%d,%d", &g_gpt.layers, &g_gpt.hidden, &g_gpt.heads,
                    &g_gpt.seq_len, &g_gpt.vocab);
      });
  std::vector<std::string> operands;
  if (std::optional<int> exit = zpipe::flags::ParseMain(*app, zpipe::flags::Args(argc, argv),
                                                        std::cout, std::cerr, &operands)) {
    return *exit;
  }
  for (const std::string& a : operands) {
    if (std::string problem =
            zpipe::flags::OneOf("hop bubble reporting fidelity overlap gpt recompute all")(a);
        !problem.empty()) {
      std::cerr << "zpipe_runtime_bench: " << problem << "\n" << zpipe::flags::UsageLine(*app);
      return 2;
    }
    what = a;
  }
  torch::set_num_threads(1);
  if (what == "hop" || what == "all") {
    if (int rc = RunHopBench(hop_rounds); rc != 0) return rc;
  }
  if (what == "bubble" || what == "all") Bubble();
  if (what == "reporting" || what == "all") Reporting();
  if (what == "fidelity" || what == "all") Fidelity();
  if (what == "overlap" || what == "all") Overlap();
  if (what == "gpt" || what == "all") Gpt();
  if (what == "recompute" || what == "all") Recompute();
  return 0;
}
