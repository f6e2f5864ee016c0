#include "worker/daemon/job_runner.h"

#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/daemon/grpc_store.h"
#include "worker/daemon/job_checkpoint.h"
#include "worker/daemon/progress_reporter.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/executor/executor.h"
#include "worker/executor/grad_sync_driver.h"
#include "worker/model/gpt.h"
#include "worker/model/synthetic.h"

namespace zpipe::worker {
namespace {

absl::StatusOr<std::vector<std::unique_ptr<model::Stage>>> MakeStages(
    const zpipe::v1::Assignment& a, const core::Plan& plan) {
  const zpipe::v1::JobSpec& spec = a.spec();
  std::vector<std::unique_ptr<model::Stage>> stages;
  for (int c = 0; c < plan.placement.chunks_per_rank(); ++c) {
    model::StageOptions so;
    so.stage = plan.placement.StageOf(a.pipeline_rank(), c);
    so.num_stages = plan.num_stages();
    so.num_microbatches = plan.num_microbatches;
    so.seed = spec.train().seed();
    absl::StatusOr<std::unique_ptr<model::Stage>> stage;
    if (spec.model().has_gpt()) {
      const auto& g = spec.model().gpt();
      stage = model::MakeGptStage(model::GptConfig{.layers = g.layers(),
                                                   .hidden = g.hidden(),
                                                   .heads = g.heads(),
                                                   .seq_len = g.seq_len(),
                                                   .vocab = g.vocab()},
                                  so);
    } else if (spec.model().has_synthetic()) {
      if (so.stage >= a.stage_costs_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("assignment has no stage_costs entry for stage ", so.stage));
      }
      const auto& cost = a.stage_costs(so.stage);
      model::SyntheticStageConfig sc;
      sc.forward_ms = cost.forward_ms();
      sc.backward_ms = cost.backward_ms();
      sc.weight_ms = cost.weight_ms();
      sc.activation_kb = cost.activation_kb();
      sc.params_mb = cost.params_mb();
      sc.param_tensors = spec.model().synthetic().param_tensors();
      stage = model::MakeSyntheticStage(sc, so);
    } else {
      return absl::InvalidArgumentError("assignment spec has no model");
    }
    if (!stage.ok()) return stage.status();
    stages.push_back(*std::move(stage));
  }
  return stages;
}

void FillStats(const IterationSummary& s, int pipeline_rank, int data_rank,
               zpipe::v1::RankIterationStats* out) {
  out->set_pipeline_rank(pipeline_rank);
  out->set_data_rank(data_rank);
  out->set_duration_s(s.duration_s);
  out->set_busy_s(s.busy_s);
  out->set_idle_s(s.idle_s);
  out->set_forward_s(s.forward_s);
  out->set_backward_s(s.backward_s);
  out->set_weight_s(s.weight_s);
  out->set_bubble_ratio(s.bubble_ratio);
  out->set_reduce_s(s.reduce_s);
  out->set_exposed_reduce_s(s.exposed_reduce_s);
  out->set_p2p_wait_s(s.p2p_wait_s);
  out->set_tokens(s.tokens);
}

}  // namespace

absl::Status RunAssignment(const zpipe::v1::Assignment& a,
                           zpipe::v1::WorkerService::StubInterface& stub,
                           const SendToCoordinator& send, const JobRunnerOptions& options,
                           const std::atomic<bool>& cancelled) {
  const zpipe::v1::JobSpec& spec = a.spec();
  auto plan = core::ParsePlanText(a.plan_text());
  if (!plan.ok())
    return absl::InvalidArgumentError(absl::StrCat("plan: ", plan.status().message()));
  if (a.pipeline_rank() < 0 || a.pipeline_rank() >= plan->num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline rank ", a.pipeline_rank(), " is not in the plan"));
  }
  auto stages = MakeStages(a, *plan);
  if (!stages.ok()) return stages.status();
  auto checkpoint = JobCheckpointer::Make(a, *plan);  // null when checkpoint.every is 0
  if (!checkpoint.ok()) return checkpoint.status();

  std::optional<model::SyntheticTokenData> data;
  if (spec.model().has_gpt()) {
    auto d = model::SyntheticTokenData::Make(spec.train().seed(), spec.model().gpt().vocab(),
                                             spec.model().gpt().seq_len(),
                                             std::max(1, spec.batch().microbatch_size()));
    if (!d.ok()) return d.status();
    data.emplace(*std::move(d));
  }

  auto store = NewGrpcRendezvousStore(stub, a.job_id());
  CommunicatorOptions co;
  co.pipeline_rank = a.pipeline_rank();
  co.pipeline_size = a.pipeline_size();
  co.data_rank = a.data_rank();
  co.data_size = std::max(1, a.data_size());
  co.key_prefix = a.rendezvous_prefix();
  co.timeout = options.comm_timeout;
  co.hostname = options.hostname;
  auto comm = NewGlooCommunicator(co, *store);
  if (!comm.ok()) return comm.status();
  // Gradient sync across the DP group: each bucket's all-reduce fires once, right after its
  // last contribution (or, with overlap off, after the last action).
  std::unique_ptr<GradSyncDriver> grad_sync;
  if (co.data_size > 1) {
    GradSyncOptions gso;
    const double bucket_mb = spec.grad_sync().bucket_mb() > 0 ? spec.grad_sync().bucket_mb() : 25;
    gso.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
    gso.overlap = !spec.grad_sync().has_overlap() || spec.grad_sync().overlap();
    gso.wait_timeout = options.comm_timeout;
    auto driver = NewGradSyncDriver(*plan, a.pipeline_rank(), *stages, gso, **comm);
    if (!driver.ok()) return driver.status();
    grad_sync = *std::move(driver);
  }

  ExecutorConfig config;
  config.microbatch_size = std::max(1, spec.batch().microbatch_size());
  config.timeout = options.comm_timeout;
  config.optimizer = spec.train().optimizer().empty() ? "adamw" : spec.train().optimizer();
  config.lr = spec.train().lr() > 0 ? spec.train().lr() : 3e-4;
  config.cancelled = &cancelled;
  ProgressReporter reporter(a.job_id(), a.pipeline_rank(), a.data_rank(), send);
  auto exec = Executor::Make(*plan, a.pipeline_rank(), a.data_rank(), config, *std::move(stages),
                             **comm, data ? &*data : nullptr, grad_sync.get(), &reporter);
  if (!exec.ok()) return exec.status();

  int start = a.start_iteration();
  if (*checkpoint != nullptr) {
    auto resumed = (*checkpoint)->Resume(**exec, *store, options.comm_timeout);
    if (!resumed.ok()) return resumed.status();
    start = std::max(start, *resumed);
  }
  const int iterations = spec.train().iterations();
  for (int it = start; it < iterations; ++it) {
    if (cancelled.load()) return absl::CancelledError("job cancelled");
    auto summary = (*exec)->RunIteration(it);
    if (!summary.ok()) return summary.status();
    if (*checkpoint != nullptr) {
      if (absl::Status st = (*checkpoint)->AfterIteration(**exec, it + 1, summary->loss); !st.ok())
        return st;
    }
    if (options.metrics != nullptr) {
      options.metrics->OnIteration(a.job_id(), a.pipeline_rank(), a.data_rank(), *summary);
    }
    reporter.Flush();  // this iteration's actions reach the coordinator before its report
    zpipe::v1::WorkerMessage msg;
    auto* report = msg.mutable_iteration();
    report->set_job_id(a.job_id());
    report->set_iteration(it);
    FillStats(*summary, a.pipeline_rank(), a.data_rank(), report->mutable_stats());
    if (summary->loss) report->set_loss(*summary->loss);
    if (!send(msg)) return absl::UnavailableError("coordinator stream closed");
  }
  reporter.Flush();
  zpipe::v1::WorkerMessage done;
  done.mutable_finished()->set_job_id(a.job_id());
  done.mutable_finished()->set_pipeline_rank(a.pipeline_rank());
  done.mutable_finished()->set_data_rank(a.data_rank());
  if (!send(done)) return absl::UnavailableError("coordinator stream closed");
  return absl::OkStatus();
}

}  // namespace zpipe::worker
