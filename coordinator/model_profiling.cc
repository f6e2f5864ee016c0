#include "coordinator/model_profiling.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/log.h"
#include "core/partition.h"

namespace zpipe::coordinator {
namespace {

std::vector<core::BlockCost> BlockCosts(const std::vector<BlockProfileData>& blocks) {
  std::vector<core::BlockCost> costs;
  for (const BlockProfileData& b : blocks) {
    costs.push_back(core::BlockCost{b.forward_ms, b.backward_ms, b.weight_ms, b.activation_bytes,
                                    b.param_bytes});
  }
  return costs;
}

ModelLayout LayoutFor(const std::vector<BlockProfileData>& blocks, const std::vector<int>& cuts,
                      std::string source) {
  ModelLayout layout;
  layout.source = std::move(source);
  layout.cuts = cuts;
  layout.blocks = static_cast<int>(blocks.size());
  const std::vector<core::BlockCost> stages = core::StageCosts(BlockCosts(blocks), cuts);
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

absl::StatusOr<ModelLayout> LayoutFromProfile(const std::vector<BlockProfileData>& blocks,
                                              const std::vector<int>& checkpoint_cuts,
                                              const JobPlan* plan, absl::string_view model_field) {
  const int num_stages = plan != nullptr ? plan->plan.num_stages() : 0;
  std::vector<int> cuts = checkpoint_cuts;
  std::string source = "checkpoint";
  if (cuts.empty()) {
    // A pipeline runs at the pace of its busiest rank: V and interleaved schedules put several
    // stages on one rank, so balance the ranks' sums, not the stages.
    std::vector<int> rank_of_stage;
    for (int s = 0; s < num_stages; ++s) rank_of_stage.push_back(plan->plan.placement.RankOf(s));
    absl::StatusOr<std::vector<int>> balanced =
        core::RankBalancedCuts(BlockCosts(blocks), rank_of_stage);
    if (!balanced.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(model_field, ": ", balanced.status().message()));
    }
    cuts = *std::move(balanced);
    source = "measured";
  }
  if (static_cast<int>(cuts.size()) != num_stages - 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint to resume has ", cuts.size() + 1, " stages, this job ", num_stages));
  }
  return LayoutFor(blocks, cuts, std::move(source));
}

JobRecord* ModelProfiling::Waiting(const std::string& job_id, int attempt,
                                   const std::string& worker_name) {
  JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr || job->state != JobState::kScheduling || job->attempt != attempt ||
      lifecycle_.run(job_id).profiling_worker != worker_name) {
    return nullptr;
  }
  return job;
}

absl::Status ModelProfiling::Result(const std::string& worker_id, const std::string& job_id,
                                    int attempt, const std::vector<BlockProfileData>& blocks,
                                    const std::vector<int>& checkpoint_cuts,
                                    const std::string& error) {
  std::string worker_name;
  JobSpec spec;
  absl::StatusOr<ModelLayout> layout;
  {
    absl::MutexLock lock(&lifecycle_.mu());
    RegisteredWorker* w = lifecycle_.workers().ById(worker_id);
    if (w == nullptr) return absl::AbortedError("worker_id is no longer current");
    worker_name = w->info.registration.name;
    JobRecord* job = Waiting(job_id, attempt, worker_name);
    if (job == nullptr) return absl::OkStatus();  // stale: the job moved on (cancelled, rescheduled)
    if (!error.empty()) {
      lifecycle_.run(job_id).profiling_worker.clear();
      lifecycle_.Finish(*job, JobState::kFailed,
                        absl::StrCat("the job could not start (checked on ", worker_name,
                                     "): ", error.substr(0, 4096)));
      return absl::OkStatus();
    }
    // The job's plan before profiling was made at admission or restore: a lookup here.
    layout = LayoutFromProfile(blocks, checkpoint_cuts, lifecycle_.PlanFor(*job).get(),
                               BlockModelField(job->spec));
    if (!layout.ok()) {
      lifecycle_.run(job_id).profiling_worker.clear();
      lifecycle_.Finish(*job, JobState::kFailed, std::string(layout.status().message()));
      return absl::OkStatus();
    }
    spec = job->spec;
  }
  // Without the lock: the plan's search takes up to schedule.search_budget of one core. The job
  // stays SCHEDULING with this worker as its profiler meanwhile; whatever moved it on wins.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(spec, &*layout);
  absl::MutexLock lock(&lifecycle_.mu());
  JobRecord* job = Waiting(job_id, attempt, worker_name);
  if (job == nullptr) return absl::OkStatus();
  lifecycle_.run(job_id).profiling_worker.clear();
  Start(*job, *std::move(layout), std::move(plan), blocks.size());
  return absl::OkStatus();
}

void ModelProfiling::Start(JobRecord& job, const ModelLayout& layout,
                           absl::StatusOr<std::shared_ptr<const JobPlan>> plan, size_t blocks) {
  job.layout = layout;
  if (!plan.ok()) {
    lifecycle_.Finish(
        job, JobState::kFailed,
        absl::StrCat("the plan from the measured costs failed: ", plan.status().message()));
    return;
  }
  plans_.Set(job.id, *plan);
  // Made from this attempt's profile: re-planning starts over from it.
  job.plan_version = 0;
  job.plan_costs.clear();
  std::vector<RegisteredWorker*> workers;
  for (const RankSlot& slot : job.ranks) {
    RegisteredWorker* holder = lifecycle_.workers().ByName(slot.worker_name);
    if (holder == nullptr || holder->connection == nullptr || holder->info.job_id != job.id) {
      lifecycle_.Finish(
          job, JobState::kFailed,
          absl::StrCat("worker ", slot.worker_name, " left while the model was profiled"));
      return;
    }
    workers.push_back(holder);
  }
  LogInfo("job ", job.id, ": cuts ", absl::StrJoin(layout.cuts, ","), " (", layout.source,
          ") over ", blocks, " blocks; predicted bubble ", (*plan)->sim.bubble_rate);
  lifecycle_.Dispatch(job, workers, *plan);
  lifecycle_.Persist(job);
  lifecycle_.UpdateGauges();
}

}  // namespace zpipe::coordinator
