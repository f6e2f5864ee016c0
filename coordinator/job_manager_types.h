// The options and result types of the JobManager facade (job_manager.h), in their own header so
// the facade's components (job_lifecycle.h, job_admission.h, worker_sessions.h, ...) share them
// without including the facade.
#ifndef ZPIPE_COORDINATOR_JOB_MANAGER_TYPES_H_
#define ZPIPE_COORDINATOR_JOB_MANAGER_TYPES_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/domain.h"
#include "coordinator/job_log_store.h"
#include "coordinator/planner.h"
#include "coordinator/progress_tracker.h"
#include "coordinator/worker_registry.h"
#include "coordinator/rendezvous.h"
#include "coordinator/trace_store.h"

namespace zpipe::coordinator {

struct ManagerOptions {
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // A rank's failure waits up to this long for the loss of another rank of the job to show (its
  // session closing, its heartbeat stopping), so the reason names the rank that died, not the
  // survivor whose connection to it broke. 0 = fail at once.
  absl::Duration failure_grace = absl::Seconds(3);
  // A new job beyond this many PENDING ones is refused (the --max-pending-jobs limit).
  int max_pending_jobs = 1000;
  // A new job beyond this many PENDING ones of the same submitter (its token name; none without
  // token files) is refused (--max-pending-jobs-per-client), so one client cannot fill the queue.
  int max_pending_jobs_per_client = 100;
  // After Load(), how long a RUNNING job waits for its workers to come back (reconnect with their
  // job) before a missing one counts as a lost rank. Longer than the workers' reconnect backoff.
  absl::Duration recovery_grace = absl::Seconds(30);
  RendezvousLimits rendezvous;
  // The newest log lines kept per rank of a job (JobLogStore; --log-lines).
  size_t log_lines_per_rank = JobLogStore::kDefaultLinesPerRank;
  // Live and dead workers kept (--max-workers, --max-dead-workers, --dead-worker-retention).
  WorkerLimits workers;
  // Finished jobs kept (--retain-finished, --retain-count): one that ended longer ago than
  // retain_finished, or is not among the retain_count that ended last, is deleted by the liveness
  // loop (JobManager::Delete's path). 0 = no such bound.
  absl::Duration retain_finished = absl::ZeroDuration();
  int retain_count = 0;
  // Whether jobs with a Python model are accepted (--allow-python-models, or a loopback
  // --listen); refused FAILED_PRECONDITION naming the flag otherwise.
  bool python_models = true;
};

// A job as clients see it.
struct JobView {
  JobRecord record;
  std::shared_ptr<const JobPlan> plan;      // null when it could not be (re)made
  std::optional<JobProgressView> progress;  // from SCHEDULING on
  int queue_position = -1;                  // PENDING only
};

struct SubmitResult {
  JobView job;
  bool created = false;
};

struct ListResult {
  std::vector<JobView> jobs;
  std::string next_page_token;
};

struct RegisterResult {
  std::string worker_id;
  bool resume_running_job = false;
};

// An iteration's executed timeline (coordinator clock) beside the plan's prediction.
struct TraceView {
  JobTrace trace;
  std::shared_ptr<const JobPlan> plan;  // null when it could not be made
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_MANAGER_TYPES_H_
