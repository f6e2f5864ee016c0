// WorkerSessions: the workers' side of the coordinator: registration, Session streams, heartbeats,
// a worker leaving, and liveness. The registry (worker_registry.h) keeps the table; this carries
// out what a worker's coming and going means for its job.
//
// Identity and reconnection: a name is held by one live worker (AlreadyExists otherwise, unless
// the registration carries that worker's instance_id: the same process reconnecting). A worker
// that re-registers claiming the rank it holds in a RUNNING job (running_job_*) continues it,
// which is how workers come back after a coordinator restart (recovery.h); one that re-registers
// without claiming its job lost its state: a lost rank.
//
// Liveness: only heartbeats refresh a worker. CheckLiveness() (called periodically by the server)
// marks a worker silent for the heartbeat timeout DEAD; its job loses that rank naming worker and
// rank, and the job's other workers get a cancel and become idle. A worker whose stream ends keeps
// its rank until the timeout, so it can reconnect. An idle worker whose last heartbeat still names
// a job (it is tearing that job down) is not given a new one.
//
// Thread-safe: works under JobLifecycle's lock (job_lifecycle.h), which it takes itself.
#ifndef ZPIPE_COORDINATOR_WORKER_SESSIONS_H_
#define ZPIPE_COORDINATOR_WORKER_SESSIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_manager_types.h"
#include "coordinator/job_store_writer.h"
#include "coordinator/metrics.h"
#include "coordinator/worker_connection.h"
#include "coordinator/worker_registry.h"

namespace zpipe::coordinator {

class WorkerSessions {
 public:
  // The collaborators are injected and must outlive the sessions.
  WorkerSessions(Clock& clock, Metrics& metrics, const ManagerOptions& options,
                 JobLifecycle& lifecycle, JobStoreWriter& writer)
      : clock_(clock),
        metrics_(metrics),
        heartbeat_timeout_(options.heartbeat_timeout),
        lifecycle_(lifecycle),
        writer_(writer) {}

  // The contracts of these are JobManager's (job_manager.h).
  absl::StatusOr<RegisterResult> Register(const WorkerRegistration& registration)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::Status Attach(const std::string& worker_id, const std::string& instance_id,
                      WorkerConnection* connection) ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  void Detach(const std::string& worker_id, WorkerConnection* connection)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::Status Heartbeat(const std::string& worker_id, const std::string& running_job)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  void Leaving(const std::string& worker_id, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  // Declares silent workers dead, applies recovery deadlines, writes unsaved jobs again.
  void CheckLiveness() ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

  absl::Status CheckAssigned(const std::string& worker_name, const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::Status CheckAssignedInstance(const std::string& instance_id,
                                     const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::StatusOr<std::string> WorkerName(const std::string& worker_id) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  std::vector<WorkerInfo> List(bool include_dead) const ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  WorkerPage ListPage(bool include_dead, int page_size, const std::string& page_token) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

 private:
  // The registering worker's name holds rank `slot` of active `job` (nullptr: none): it continues
  // the job when it claims that rank of a RUNNING job (`*result` says so); otherwise returns why
  // the rank is lost ("" when nothing is).
  std::string ClaimHeldRank(const WorkerRegistration& registration, RegisteredWorker& entry,
                            JobRecord* job, const RankSlot* slot, RegisterResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());
  // Declares `worker` dead for `reason`; its job loses the rank.
  void MarkDead(RegisteredWorker& worker, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());

  Clock& clock_;
  Metrics& metrics_;
  const absl::Duration heartbeat_timeout_;
  JobLifecycle& lifecycle_;
  JobStoreWriter& writer_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_SESSIONS_H_
