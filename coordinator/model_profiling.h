// ModelProfiling: profiling a TorchScript or Python model before its plan is made. A job whose
// spec names no cuts reserves its workers and asks the first of them to time every block
// (JobLifecycle sends the kProfile command); the answer comes here: cut points are chosen that
// balance the ranks' measured costs (core::RankBalancedCuts), or kept from the checkpoint the job
// resumes, the plan is made from the measured per-stage costs, and the assignments go out. The
// pure step is LayoutFromProfile.
//
// Thread-safe: works under JobLifecycle's lock (job_lifecycle.h), which it takes itself, and
// makes the plan from the measured costs without it (a search takes up to its budget).
#ifndef ZPIPE_COORDINATOR_MODEL_PROFILING_H_
#define ZPIPE_COORDINATOR_MODEL_PROFILING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/domain.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_plans.h"
#include "coordinator/planner.h"

namespace zpipe::coordinator {

// The layout of a model whose blocks were timed as `blocks`, for a job planned as `plan`: cut at
// `checkpoint_cuts` when the job resumes a checkpoint (source "checkpoint"), else where the ranks'
// summed costs balance (source "measured"). FailedPrecondition, its message the job's failure
// reason, when no balance exists (the message then starts with `model_field`: "model.torchscript"
// or "model.python") or the cuts do not give the plan's number of stages.
absl::StatusOr<ModelLayout> LayoutFromProfile(const std::vector<BlockProfileData>& blocks,
                                              const std::vector<int>& checkpoint_cuts,
                                              const JobPlan* plan, absl::string_view model_field);

class ModelProfiling {
 public:
  // The collaborators are injected and must outlive the profiling.
  ModelProfiling(JobLifecycle& lifecycle, JobPlans& plans) : lifecycle_(lifecycle), plans_(plans) {}

  // See JobManager::ProfileResult.
  absl::Status Result(const std::string& worker_id, const std::string& job_id, int attempt,
                      const std::vector<BlockProfileData>& blocks,
                      const std::vector<int>& checkpoint_cuts, const std::string& error)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

 private:
  // The job when it still waits for this profile: SCHEDULING, in `attempt`, profiled by
  // `worker_name`; else null (the answer is stale).
  JobRecord* Waiting(const std::string& job_id, int attempt, const std::string& worker_name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());
  // Gives `job` its measured layout and `plan` (made from it) and sends the assignments; or
  // fails it saying why.
  void Start(JobRecord& job, const ModelLayout& layout,
             absl::StatusOr<std::shared_ptr<const JobPlan>> plan, size_t blocks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());

  JobLifecycle& lifecycle_;
  JobPlans& plans_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_MODEL_PROFILING_H_
