// JobAdmission: whether a submitted job is taken (JobManager::Submit). It checks the id and the
// spec (a Python model only where ManagerOptions::python_models allows it), answers a resubmit
// of the same job idempotently, applies the pending-job limits and the store's state, makes the
// plan, and stores the job before it exists, so a client never holds an id that a restart would
// lose.
//
// A job is its resolved spec (spec_defaults.h) from here on: what is stored, shown and compared
// on a resubmit, so a spec as a client printed it (defaults filled) is the same job as the file it
// came from. Planning can take a while for big pipelines: it runs without any lock, and the checks
// are made again after it (a concurrent submit of the same id, a shutdown).
//
// Thread-safe: works under JobLifecycle's lock (job_lifecycle.h), which it takes itself.
#ifndef ZPIPE_COORDINATOR_JOB_ADMISSION_H_
#define ZPIPE_COORDINATOR_JOB_ADMISSION_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_manager_types.h"
#include "coordinator/job_store_writer.h"

namespace zpipe::coordinator {

class JobAdmission {
 public:
  // The collaborators are injected and must outlive the admission.
  JobAdmission(Clock& clock, const ManagerOptions& options, JobLifecycle& lifecycle,
               JobStoreWriter& writer)
      : clock_(clock), options_(options), lifecycle_(lifecycle), writer_(writer) {}

  // See JobManager::Submit.
  absl::StatusOr<SubmitResult> Submit(std::string job_id, const JobSpec& submitted,
                                      bool validate_only, std::string submitted_by)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

 private:
  // The answer to a submit of an id that exists: the job when it is the same one (same spec and
  // submitter), else AlreadyExists. nullopt for a new id.
  std::optional<absl::StatusOr<SubmitResult>> Existing(const std::string& job_id,
                                                       const JobSpec& spec,
                                                       const std::string& submitted_by) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());
  // ResourceExhausted while the queue (or the submitter's share of it) is full; the store's error
  // while it holds back earlier changes (it would not keep this job either).
  absl::Status CheckRoom(const std::string& job_id, const std::string& submitted_by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());
  // Stores the new job and adds it to the queue; the store's refusal says the job was not created.
  absl::StatusOr<SubmitResult> Create(const std::string& job_id, const JobSpec& spec,
                                      std::string submitted_by, std::shared_ptr<const JobPlan> plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());

  Clock& clock_;
  const ManagerOptions& options_;
  JobLifecycle& lifecycle_;
  JobStoreWriter& writer_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_ADMISSION_H_
