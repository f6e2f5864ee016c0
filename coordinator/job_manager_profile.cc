// JobManager: profiling a TorchScript model before its plan is made. A job whose spec names no
// cuts reserves its workers, asks the first of them to time every block (kProfile), and when the
// answer arrives chooses cut points that minimise the slowest stage (core::BalancedCuts), makes
// the plan from the measured per-stage costs and sends the assignments.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_manager.h"
#include "coordinator/planner.h"
#include "core/partition.h"
#include "util/log.h"

namespace zpipe::coordinator {

bool JobManager::NeedsProfile(const JobRecord& job) {
  const auto* ts = std::get_if<TorchScriptConfig>(&job.spec.model);
  return ts != nullptr && ts->cuts.empty();
}

namespace {

ModelLayout LayoutFor(const std::vector<BlockProfileData>& blocks, const std::vector<int>& cuts,
                      std::string source) {
  std::vector<core::BlockCost> costs;
  for (const BlockProfileData& b : blocks) {
    costs.push_back(core::BlockCost{b.forward_ms, b.backward_ms, b.weight_ms, b.activation_bytes,
                                    b.param_bytes});
  }
  ModelLayout layout;
  layout.source = std::move(source);
  layout.cuts = cuts;
  layout.blocks = static_cast<int>(blocks.size());
  const std::vector<core::BlockCost> stages = core::StageCosts(costs, cuts);
  for (size_t s = 0; s < stages.size(); ++s) {
    ModelLayout::Stage st;
    st.stage = static_cast<int>(s);
    st.first_block = s == 0 ? 0 : cuts[s - 1];
    st.end_block = s < cuts.size() ? cuts[s] : layout.blocks;
    st.forward_ms = stages[s].f_ms;
    st.backward_ms = stages[s].b_ms;
    st.weight_ms = stages[s].w_ms;
    st.activation_kb = stages[s].activation_bytes / 1024.0;
    st.params_mb = stages[s].param_bytes / 1e6;
    layout.stages.push_back(st);
  }
  return layout;
}

}  // namespace

absl::Status JobManager::ProfileResult(const std::string& worker_id, const std::string& job_id,
                                       int attempt, const std::vector<BlockProfileData>& blocks,
                                       const std::vector<int>& checkpoint_cuts,
                                       const std::string& error) {
  absl::MutexLock lock(&mu_);
  RegisteredWorker* w = workers_.ById(worker_id);
  if (w == nullptr) return absl::AbortedError("worker_id is no longer current");
  JobRecord* job = queue_.Find(job_id);
  JobRuntime& rt = runtime_[job_id];
  if (job == nullptr || job->state != JobState::kScheduling || job->attempt != attempt ||
      rt.profiling_worker != w->info.registration.name) {
    return absl::OkStatus();  // stale: the job moved on (cancelled, rescheduled)
  }
  rt.profiling_worker.clear();
  if (!error.empty()) {
    FinishJobLocked(*job, JobState::kFailed,
                    absl::StrCat("the job could not start (checked on ", w->info.registration.name,
                                 "): ", error.substr(0, 4096)));
    return absl::OkStatus();
  }
  const int num_stages = PlanForLocked(*job) ? rt.plan->plan.num_stages() : 0;
  std::vector<int> cuts = checkpoint_cuts;
  std::string source = "checkpoint";
  if (cuts.empty()) {
    // A pipeline runs at the pace of its busiest rank: V and interleaved schedules put several
    // stages on one rank, so balance the ranks' sums, not the stages.
    std::vector<int> rank_of_stage;
    for (int s = 0; s < num_stages; ++s) rank_of_stage.push_back(rt.plan->plan.placement.RankOf(s));
    absl::StatusOr<std::vector<int>> balanced = core::RankBalancedCuts(
        [&] {
          std::vector<core::BlockCost> c;
          for (const BlockProfileData& b : blocks) {
            c.push_back(core::BlockCost{b.forward_ms, b.backward_ms, b.weight_ms,
                                        b.activation_bytes, b.param_bytes});
          }
          return c;
        }(),
        rank_of_stage);
    if (!balanced.ok()) {
      FinishJobLocked(*job, JobState::kFailed,
                      absl::StrCat("model.torchscript: ", balanced.status().message()));
      return absl::OkStatus();
    }
    cuts = *std::move(balanced);
    source = "measured";
  }
  if (static_cast<int>(cuts.size()) != num_stages - 1) {
    FinishJobLocked(*job, JobState::kFailed,
                    absl::StrCat("the checkpoint to resume has ", cuts.size() + 1,
                                 " stages, this job ", num_stages));
    return absl::OkStatus();
  }
  job->layout = LayoutFor(blocks, cuts, source);
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(job->spec, &*job->layout);
  if (!plan.ok()) {
    FinishJobLocked(
        *job, JobState::kFailed,
        absl::StrCat("the plan from the measured costs failed: ", plan.status().message()));
    return absl::OkStatus();
  }
  rt.plan = *plan;
  // Made from this attempt's profile: re-planning starts over from it.
  job->plan_version = 0;
  job->plan_costs.clear();
  std::vector<RegisteredWorker*> workers;
  for (const RankSlot& slot : job->ranks) {
    RegisteredWorker* holder = workers_.ByName(slot.worker_name);
    if (holder == nullptr || holder->connection == nullptr || holder->info.job_id != job->id) {
      FinishJobLocked(
          *job, JobState::kFailed,
          absl::StrCat("worker ", slot.worker_name, " left while the model was profiled"));
      return absl::OkStatus();
    }
    workers.push_back(holder);
  }
  LogInfo("job ", job->id, ": cuts ", absl::StrJoin(cuts, ","), " (", source, ") over ",
          blocks.size(), " blocks; predicted bubble ", rt.plan->sim.bubble_rate);
  DispatchLocked(*job, workers, rt.plan);
  PersistLocked(*job);
  UpdateGaugesLocked();
  return absl::OkStatus();
}

}  // namespace zpipe::coordinator
