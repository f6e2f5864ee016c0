// Test support: a whole pipeline in one process. Every rank (p pipeline ranks x d data ranks) runs
// on its own thread with real GPT stages, a real Executor and a TCP communicator over an
// in-memory store. Header-only; for executor_test and checkpoint_test.
#ifndef ZPIPE_WORKER_EXECUTOR_TESTING_PIPELINE_HARNESS_H_
#define ZPIPE_WORKER_EXECUTOR_TESTING_PIPELINE_HARNESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "core/planning.h"
#include "core/schedule.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/executor/executor.h"
#include "worker/executor/grad_sync_driver.h"
#include "worker/model/gpt.h"

namespace zpipe::worker::testing {

// `kind`'s plan for p pipeline ranks and m microbatches (uniform stage costs), with its sends and
// receives, as core::PlanSchedule makes it.
inline absl::StatusOr<core::Plan> LoweredPlan(core::ScheduleKind kind, int p, int m) {
  core::PlanRequest req;
  req.schedule = std::string(core::ScheduleName(kind));
  req.pipeline = p;
  req.microbatches = m;
  req.inputs = [](const core::Placement& placement) {
    return core::UniformInputs(placement, core::StageCost{});
  };
  absl::StatusOr<core::PlannedSchedule> planned = core::PlanSchedule(req);
  if (!planned.ok()) return planned.status();
  return std::move(planned->plan);
}

// What every rank of one pipeline run is built from.
struct RankOptions {
  std::string key_prefix;  // the communicators' store keys: unique per run sharing a store
  int data_size = 1;       // d; with d > 1 each rank gets a GradSyncDriver
  model::GptConfig gpt;
  uint64_t init_seed = 0;  // the stages' initial parameters
  ExecutorConfig config;
  GradSyncOptions grad_sync;  // with d > 1
};

// One rank's executor and what it borrows, destroyed executor first.
struct PipelineRank {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradSyncDriver> grad_sync;  // null when d == 1
  std::unique_ptr<Executor> exec;
};

// Builds pipeline rank `r`, data rank `dr` of `lowered` (the plan of every pipeline rank). Blocks
// until every rank sharing `store` and the key prefix has connected, so each rank needs its own
// thread (RunOnThreads). `data` and `sink` (optional) must outlive the rank.
inline absl::StatusOr<PipelineRank> MakePipelineRank(const core::Plan& lowered, int r, int dr,
                                                     const RankOptions& o, KeyValueStore& store,
                                                     const model::SyntheticTokenData* data,
                                                     ActionSink* sink) {
  const core::Placement& placement = lowered.placement;
  PipelineRank out;
  CommunicatorOptions opts;
  opts.pipeline_rank = r;
  opts.pipeline_size = placement.num_ranks();
  opts.data_rank = dr;
  opts.data_size = o.data_size;
  opts.key_prefix = o.key_prefix;
  opts.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewTcpCommunicator(opts, store);
  if (!comm.ok()) return comm.status();
  out.comm = *std::move(comm);
  std::vector<std::unique_ptr<model::Stage>> stages;
  for (int c = 0; c < placement.chunks_per_rank(); ++c) {
    model::StageOptions so;
    so.stage = placement.StageOf(r, c);
    so.num_stages = placement.num_stages();
    so.num_microbatches = lowered.num_microbatches;
    so.seed = o.init_seed;
    so.device = o.config.device;
    absl::StatusOr<std::unique_ptr<model::Stage>> stage = model::MakeGptStage(o.gpt, so);
    if (!stage.ok()) return stage.status();
    stages.push_back(*std::move(stage));
  }
  if (o.data_size > 1) {
    absl::StatusOr<std::unique_ptr<GradSyncDriver>> driver =
        NewGradSyncDriver(lowered, r, stages, o.grad_sync, *out.comm);
    if (!driver.ok()) return driver.status();
    out.grad_sync = *std::move(driver);
  }
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Make(
      lowered, r, dr, o.config, std::move(stages), *out.comm, data, out.grad_sync.get(), sink);
  if (!exec.ok()) return exec.status();
  out.exec = *std::move(exec);
  return out;
}

// Runs `rank(g)` for every global rank g in [0, n) on a thread of its own (pipeline rank g % p,
// data rank g / p, by convention) and waits for all; returns the lowest rank's error, if any.
inline absl::Status RunOnThreads(int n, const std::function<absl::Status(int)>& rank) {
  std::vector<absl::Status> errors(n);
  std::vector<std::thread> threads;
  for (int g = 0; g < n; ++g) {
    threads.emplace_back([&, g] { errors[g] = rank(g); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : errors) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker::testing

#endif  // ZPIPE_WORKER_EXECUTOR_TESTING_PIPELINE_HARNESS_H_
