// JobLifecycle: the job state machine, and the lock the coordinator's scheduling state lives
// under. It owns the job records (JobQueue), the workers (WorkerRegistry), the recovery state
// (Recovery) and what a running attempt has done (its finished ranks, the worker profiling its
// model), and carries out the transitions that involve several of them: state changes with their
// event and store write, finishing a job, losing a rank, and scheduling (reserving workers,
// profiling, sending assignments).
//
// Lifecycle: PENDING -> SCHEDULING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (RUNNING ->
// RESTARTING -> SCHEDULING when a rank is lost and restarts are left); terminal states always
// carry a reason. Pending jobs are scheduled FIFO per device kind (job_queue.h): the oldest pending
// job of a kind takes the first p*d idle, connected workers that can run it (worker_match.h: a
// CUDA job needs workers whose reported LibTorch has CUDA; ordered by name; global rank
// g = data_rank * p + pipeline_rank gets the g-th), and later jobs of that kind wait behind it.
// While it waits, its reason says how many workers it found and names those that cannot run it.
// A TorchScript job without cuts first has its model's blocks timed on its first worker
// (model_profiling.h) and is dispatched when the answer comes.
//
// Lost ranks: a rank of a RUNNING job is lost when its worker dies, leaves, re-registers without
// the job, or reports a failure (worker_sessions.h, rank_reports.h). With spec.max_restarts left,
// the job goes to RESTARTING: the attempt is closed (JobRecord::attempts), its workers are
// cancelled and released, and after spec.restart_backoff it is scheduled again ahead of later jobs
// of its device kind; the workers resume from the latest complete checkpoint. Otherwise the job
// FAILS with the reason (recovery.h decides).
//
// Locking: one lock, mu(), guards the queue, the registry, recovery and the run state, because a
// transition changes them together (a worker reserved for a job is BUSY in the same step as the
// job becomes SCHEDULING): they cannot have locks of their own. The components that work on this
// state (JobAdmission, WorkerSessions, RankReports, ModelProfiling, and the JobManager facade)
// take mu() themselves; every method here that needs it says so in its annotation. Under mu()
// come, in this order, JobPlans' lock and then the leaves (JobStoreWriter, RunMonitor, Rendezvous,
// JobEventLog, JobLogStore, Metrics, WorkerConnection::Send), none of which calls back.
#ifndef ZPIPE_COORDINATOR_JOB_LIFECYCLE_H_
#define ZPIPE_COORDINATOR_JOB_LIFECYCLE_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/job_manager_types.h"
#include "coordinator/job_plans.h"
#include "coordinator/job_queue.h"
#include "coordinator/job_store_writer.h"
#include "coordinator/metrics.h"
#include "coordinator/recovery.h"
#include "coordinator/rendezvous.h"
#include "coordinator/run_monitor.h"
#include "coordinator/worker_registry.h"

namespace zpipe::coordinator {

class JobLifecycle {
 public:
  // The collaborators are injected and must outlive the lifecycle.
  JobLifecycle(Clock& clock, Metrics& metrics, const ManagerOptions& options,
               JobStoreWriter& writer, JobPlans& plans, RunMonitor& monitor, Rendezvous& rendezvous,
               JobEventLog& events);

  // What an attempt of a job has done so far.
  struct Run {
    std::set<int> finished;        // global ranks done with every iteration
    std::string profiling_worker;  // SCHEDULING: the worker timing the model's blocks
  };

  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }
  JobQueue& queue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_; }
  const JobQueue& queue() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return queue_; }
  WorkerRegistry& workers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return workers_; }
  const WorkerRegistry& workers() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return workers_; }
  Recovery& recovery() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return recovery_; }
  Run& run(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return runs_[job_id]; }
  // After Shutdown(), no job is scheduled and new jobs and registrations are refused.
  bool shut_down() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return shut_down_; }

  // Takes the jobs loaded from the store after a coordinator restart (reconciliation: recovery.h).
  // `events[i]` are `loaded[i]`'s stored events (JobStore::LoadEvents). Makes the plan of every
  // unfinished job first, without the lock (each up to its search budget).
  void Restore(std::vector<JobRecord> loaded, std::vector<std::vector<JobEvent>> events)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Adds a new job, already stored, as PENDING with the plan made at submit, and schedules.
  JobRecord& Admit(JobRecord record, std::shared_ptr<const JobPlan> plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops scheduling and writes unsaved jobs a last time (what is left is lost with the process).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  void SetState(JobRecord& job, JobState to, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to a terminal state and releases its workers (cancelling them unless
  // SUCCEEDED); then tries to schedule pending jobs.
  void Finish(JobRecord& job, JobState to, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes terminal `job`: removed from the store first (nothing is dropped that the store
  // still holds: on its error the job stays, and the error is returned), then from memory with
  // its plan, progress, timeline and event history. `job` dangles after an OK return.
  absl::Status Delete(JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the finished jobs past the retention (ManagerOptions::retain_finished,
  // retain_count), the longest finished first; a store refusal stops it until the next call.
  // Returns the ids deleted.
  std::vector<std::string> DeleteExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of `job` was lost (`reason` names it): RESTARTING when the job is RUNNING and has
  // restarts left, else FAILED (Recovery::OnRankLost decides).
  void LoseRank(JobRecord& job, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RUNNING jobs whose failure grace or reconnection wait ran out lose their rank; RESTARTING jobs
  // whose backoff is over are scheduled.
  void CheckRecoveryDeadlines(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Offers waiting jobs the idle workers (JobQueue::Schedule); a job that gets them is reserved
  // (SCHEDULING) and then profiled or dispatched.
  void TrySchedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the assignments of `plan` to the reserved `workers` (by global rank); the job becomes
  // RUNNING.
  void Dispatch(JobRecord& job, const std::vector<RegisteredWorker*>& workers,
                std::shared_ptr<const JobPlan> plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's plan (JobPlans::For). Made before anyone calls this under the lock for a job that
  // can run (at admission, at Restore, or from the profile without the lock), so a lookup here;
  // JobManager makes a finished job's before it takes the lock to read it.
  // Const: the plans are JobPlans' state, under its own lock.
  std::shared_ptr<const JobPlan> PlanFor(const JobRecord& job) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  JobView View(const JobRecord& job, bool with_progress, bool with_microbatches) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes the job (JobStoreWriter::Put: a refusal is kept and retried). Persist is Store where
  // the caller acknowledges nothing.
  absl::Status Store(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Persist(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Store(job).IgnoreError();
  }
  // Writes every unsaved job again (JobStoreWriter::RetryUnsaved); OK when none is left.
  absl::Status RetryUnsaved() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  // The workers holding `job`'s ranks become idle (dead without a session), cancelled first when
  // `cancel`.
  void Release(JobRecord& job, bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `job` the idle `workers` (one per global rank): profiles its model or dispatches it.
  // False when it cannot run (no plan: FAILED).
  bool Start(JobRecord& job, std::vector<RegisteredWorker*> workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves `workers` for `job` (state SCHEDULING, attempt + 1, job.ranks set).
  void Reserve(JobRecord& job, const std::vector<RegisteredWorker*>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the first reserved worker to time the model's blocks (kProfile).
  void StartProfile(JobRecord& job, RegisteredWorker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock& clock_;
  Metrics& metrics_;
  JobStoreWriter& writer_;
  JobPlans& plans_;
  RunMonitor& monitor_;
  Rendezvous& rendezvous_;
  JobEventLog& events_;
  const absl::Duration recovery_grace_;
  const absl::Duration retain_finished_;
  const int retain_count_;

  mutable absl::Mutex mu_;
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  Recovery recovery_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Run> runs_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_LIFECYCLE_H_
