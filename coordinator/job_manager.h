// JobManager: the coordinator's logic on domain types; the gRPC services are thin adapters over
// it. It is a facade over four pieces, each with its own header and tests, and carries out the
// transitions that involve more than one of them:
//   JobQueue        job records in submission order; the FIFO-per-device-kind queue order;
//   WorkerRegistry  registrations, sessions, heartbeats, worker states (no job internals);
//   RunMonitor      progress, executed timelines, iteration summaries, pipeline metrics;
//   Recovery        lost ranks, restarts, failure grace, reconciliation after a restart.
// One lock (mu_) guards the queue, the registry, recovery and the per-job runtime; the pieces
// themselves are not thread-safe. RunMonitor, Rendezvous and JobEventLog lock on their own and
// are only ever taken after mu_ (or without it), never the other way round.
//
// Lifecycle: PENDING -> SCHEDULING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (RUNNING ->
// RESTARTING -> SCHEDULING when a rank is lost and restarts are left); terminal states
// always carry a reason. Pending jobs are scheduled FIFO per device kind: the oldest pending job
// of a kind takes the first p*d idle, connected workers that can run it (worker_match.h: a CUDA
// job needs workers whose reported LibTorch has CUDA; ordered by name; global rank
// g = data_rank * p + pipeline_rank gets the g-th), and later jobs of that kind wait behind it.
// While it waits, its reason says how many workers it found and names those that cannot run it.
//
// Liveness: only heartbeats refresh a worker. CheckLiveness() (called periodically by the server)
// marks a worker silent for the heartbeat timeout DEAD; its job loses that rank (below) naming
// worker and rank, and the job's other workers get a cancel and become idle. A worker whose
// stream ends keeps its rank until the timeout, so it can reconnect. An idle worker whose last
// heartbeat still names a job (it is tearing that job down) is not given a new one.
//
// Lost ranks: a rank of a RUNNING job is lost when its worker dies, leaves, re-registers without
// the job, or reports a failure (failure_grace first looks for a lost peer to blame). With
// spec.max_restarts left, the job goes to RESTARTING: the attempt is closed (JobRecord::attempts),
// its workers are cancelled and released, and after spec.restart_backoff it is scheduled again
// ahead of later jobs of its device kind; the workers resume from the latest complete checkpoint.
// Otherwise the job FAILS with the reason.
//
// Restart reconciliation: Load() restores every job. PENDING jobs stay queued; SCHEDULING jobs go
// back to PENDING (their assignments may not all have arrived); RESTARTING jobs may be scheduled
// at once; RUNNING jobs keep their iteration count and wait `recovery_grace` for their workers to
// re-register with the same name, claiming the job and rank (RegisterWorker's running_job_*):
// those continue (a rank that finished meanwhile says so); a worker still missing at the deadline
// is a lost rank. A worker that re-registers without claiming the job it held lost its state: a
// lost rank too. Shutdown() leaves running jobs alone: the next coordinator picks them up.
//
// Store failures (a full disk): nothing acknowledged is lost. A change the store refuses stays in
// memory, the job is marked unsaved, and CheckLiveness() writes every unsaved job again until the
// store takes it; meanwhile StoreStatus() is an error (/readyz fails, the
// zpipe_store_unsaved_jobs gauge is non-zero, the log says so once), new jobs are refused with
// that error (ResourceExhausted when the store is full), and a cancel is not acknowledged until
// it is stored. A worker's report is taken either way: its effect is kept and written later.
//
// Thread-safe. Collaborators (clock, store, metrics) are injected and must outlive the manager.
#ifndef ZPIPE_COORDINATOR_JOB_MANAGER_H_
#define ZPIPE_COORDINATOR_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/job_log_store.h"
#include "coordinator/job_queue.h"
#include "coordinator/job_store.h"
#include "coordinator/metrics.h"
#include "coordinator/planner.h"
#include "coordinator/recovery.h"
#include "coordinator/rendezvous.h"
#include "coordinator/replanner.h"
#include "coordinator/run_monitor.h"
#include "coordinator/worker_connection.h"
#include "coordinator/worker_registry.h"

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

class JobManager {
 public:
  JobManager(Clock& clock, JobStore& store, Metrics& metrics, ManagerOptions options);
  ~JobManager();

  // Restores jobs from the store; call once before serving.
  absl::Status Load();

  // ---- client-facing ----
  // `job_id` empty = generate one. See SubmitJob in coordinator.proto for idempotency; specs are
  // compared with their defaults resolved (spec_defaults.h), which is also how the job is stored
  // and returned (validate_only too). A resubmit by another submitter is ALREADY_EXISTS.
  // `submitted_by` is recorded with the job. ResourceExhausted for a new job while max_pending_jobs
  // are PENDING, or max_pending_jobs_per_client of a non-empty `submitted_by`. When the store cannot save the new job, or still holds back earlier changes
  // (StoreStatus), the job is refused and forgotten (nothing unsaved is acknowledged):
  // ResourceExhausted when the store is full, Unavailable for other store errors.
  absl::StatusOr<SubmitResult> Submit(std::string job_id, const JobSpec& spec, bool validate_only,
                                      std::string submitted_by = "");
  // Who submitted the job (JobRecord::submitted_by). NotFound for an unknown job.
  absl::StatusOr<std::string> SubmittedBy(const std::string& job_id) const;
  // Makes the job's plan on first use after a restart (for its predicted statistics).
  absl::StatusOr<JobView> Get(const std::string& job_id, bool with_microbatches = true);
  // page_size: 0 = 100, capped at 1000. Empty `states` = all.
  absl::StatusOr<ListResult> List(const std::set<JobState>& states, int page_size,
                                  const std::string& page_token) const;
  // Acknowledged once CANCELLED is stored: while the store refuses it, the job is cancelled (its
  // workers stopped) but the store's error is returned; cancelling again answers OK once stored.
  absl::StatusOr<JobView> Cancel(const std::string& job_id, std::string reason);
  std::vector<WorkerInfo> Workers(bool include_dead) const;
  // The executed timeline of `iteration` (nullopt = the latest complete one); see
  // TraceStore::Get for the errors.
  absl::StatusOr<TraceView> Trace(const std::string& job_id, std::optional<int> iteration);
  // The job's plan (made on first use after a restart). FailedPrecondition when it cannot be
  // made (the job FAILED for that reason).
  absl::StatusOr<std::shared_ptr<const JobPlan>> Plan(const std::string& job_id);

  // ---- worker-facing ----
  // AlreadyExists while another connected worker holds the name, unless `registration` carries
  // that worker's instance_id (the same process reconnecting); see worker.proto "Identity".
  absl::StatusOr<RegisterResult> RegisterWorker(const WorkerRegistration& registration);
  // Binds a Session stream to a registration. NotFound for an unknown id; Aborted when the
  // registration was replaced; PermissionDenied when the registration has an instance_id and
  // `instance_id` differs. `connection` must stay valid until DetachSession.
  absl::Status AttachSession(const std::string& worker_id, const std::string& instance_id,
                             WorkerConnection* connection);
  // OK when the worker named `worker_name` holds a rank of (or is reserved for) job `job_id`;
  // PermissionDenied otherwise (also for an unknown job).
  absl::Status CheckAssigned(const std::string& worker_name, const std::string& job_id) const;
  // CheckAssigned for the live worker whose registration has `instance_id` (rendezvous callers);
  // PermissionDenied when no live worker has it.
  absl::Status CheckAssignedInstance(const std::string& instance_id,
                                     const std::string& job_id) const;
  void DetachSession(const std::string& worker_id, WorkerConnection* connection);
  // Aborted when `worker_id` is no longer the worker's current registration. `running_job`: the
  // job the worker says it still runs ("" = none); an idle worker naming one is not scheduled.
  absl::Status Heartbeat(const std::string& worker_id, const std::string& running_job = "");
  // A message from `worker_name` stamped `worker_time_s` (its clock, Unix seconds) has just
  // arrived: a sample for its clock offset (TraceStore).
  void ObserveWorkerClock(const std::string& worker_name, double worker_time_s);
  // Lock-free with respect to the job table: for ingest rate (RunMonitor).
  void Progress(const std::string& worker_name, const ProgressBatchData& batch);
  absl::Status IterationReport(const std::string& worker_id, const std::string& job_id,
                               int iteration, const RankStats& stats, std::optional<double> loss,
                               std::optional<double> eval_loss = std::nullopt);
  absl::Status RankFinished(const std::string& worker_id, const std::string& job_id,
                            int pipeline_rank, int data_rank);
  // The worker said it is going away: declared dead now ("left: <reason>"), failing its job.
  void WorkerLeaving(const std::string& worker_id, const std::string& reason);
  // `permanent`: the worker says a restart cannot fix it (a full checkpoint disk): the job FAILS
  // now, naming this rank, without a restart or waiting failure_grace for a peer to blame.
  absl::Status RankFailed(const std::string& worker_id, const std::string& job_id,
                          int pipeline_rank, int data_rank, const std::string& message,
                          bool permanent = false);
  // A worker's answer to a kProfile command (job_manager_profile.cc): the job's cuts are chosen
  // from `blocks` (or kept from `checkpoint_cuts`), the plan is made from the measured costs and
  // the assignments go out; a non-empty `error` fails the job with it.
  absl::Status ProfileResult(const std::string& worker_id, const std::string& job_id, int attempt,
                             const std::vector<BlockProfileData>& blocks,
                             const std::vector<int>& checkpoint_cuts, const std::string& error);
  // The worker's stable name for a registration id (for the session's progress path).
  absl::StatusOr<std::string> WorkerName(const std::string& worker_id) const;

  // ---- rendezvous ----
  absl::Status RendezvousSet(const std::string& job_id, const std::string& key, std::string value);
  absl::StatusOr<std::string> RendezvousGet(const std::string& job_id,
                                            const std::string& key) const;
  absl::StatusOr<std::vector<std::string>> RendezvousWait(
      const std::string& job_id, const std::vector<std::string>& keys, absl::Time deadline,
      const std::function<bool()>& cancelled) const;

  // ---- housekeeping ----
  // Declares silent workers dead and fails the jobs they held; fails RUNNING jobs whose workers
  // did not come back after a restart; writes unsaved jobs to the store again. Call periodically.
  void CheckLiveness();
  // OK while every job change is stored; else the store's error (ResourceExhausted when it is
  // full) saying how many jobs wait to be written. For /readyz and new submits.
  absl::Status StoreStatus() const;
  // Refuses new registrations and jobs and wakes all watchers. Workers and their jobs carry on:
  // they reconnect to the next coordinator on the same store.
  void Shutdown();

  const JobEventLog& events() const { return events_; }
  // The workers' log lines per job and rank (thread-safe; closed by Shutdown()).
  JobLogStore& logs() { return logs_; }
  // Changes whenever the job's progress does (WatchJob polls it).
  uint64_t ProgressVersion(const std::string& job_id) const {
    return monitor_.ProgressVersion(job_id);
  }
  uint64_t dropped_progress_events() const { return monitor_.dropped_events(); }
  const ManagerOptions& options() const { return options_; }

 private:
  // A re-plan sent to the ranks, waiting for the summary of its switch iteration.
  struct PendingSwitch {
    ReplanProposal proposal;
    int switch_iteration = 0;
    int measured_iteration = 0;
  };
  // What a due re-plan check works on, copied out of the lock.
  struct ReplanCheck {
    JobSpec spec;
    std::shared_ptr<const JobPlan> plan;
    std::optional<ModelLayout> layout;
    ReplanWindow window;
    int attempt = 0;
    double iteration_seconds = 0;
  };

  struct JobRuntime {
    std::shared_ptr<const JobPlan> plan;
    ReplanWindow replan_window;            // iterations run with `plan` since the last check
    std::optional<PendingSwitch> pending;  // a switch on its way to the ranks
    bool plan_failed = false;              // PlanJob failed once; do not retry
    std::set<int> finished;                // global ranks done with every iteration
    std::string profiling_worker;          // SCHEDULING: the worker timing the model's blocks
  };

  JobView ViewLocked(const JobRecord& job, bool with_progress, bool with_microbatches) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckAssignedLocked(const std::string& worker_name, const std::string& job_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  void SetStateLocked(JobRecord& job, JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to a terminal state and releases its workers (cancelling them unless
  // SUCCEEDED); then tries to schedule pending jobs.
  void FinishJobLocked(JobRecord& job, JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of `job` was lost (`reason` names it): RESTARTING when the job is RUNNING and has
  // restarts left, else FAILED (Recovery::OnRankLost decides).
  void LoseRankLocked(JobRecord& job, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The workers holding `job`'s ranks become idle (dead without a session), cancelled first when
  // `cancel`.
  void ReleaseWorkersLocked(JobRecord& job, bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TryScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ScheduleJobLocked(JobRecord& job, std::vector<RegisteredWorker*> workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves `workers` for `job` (state SCHEDULING, attempt + 1, job.ranks set).
  void ReserveLocked(JobRecord& job, const std::vector<RegisteredWorker*>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the assignments of `plan` to the reserved workers; the job becomes RUNNING.
  void DispatchLocked(JobRecord& job, const std::vector<RegisteredWorker*>& workers,
                      std::shared_ptr<const JobPlan> plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TorchScript jobs without cuts are profiled before their plan is made.
  static bool NeedsProfile(const JobRecord& job);
  void MarkDeadLocked(RegisteredWorker& w, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const JobPlan> PlanForLocked(const JobRecord& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the job; on failure marks it unsaved (written again by RetryUnsavedLocked) and returns
  // the store's error. PersistLocked is StoreLocked where the caller acknowledges nothing.
  absl::Status StoreLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    StoreLocked(job).IgnoreError();
  }
  // Writes every unsaved job again; OK when none is left.
  absl::Status RetryUnsavedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StoreStatusLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Re-planning (job_manager_workers.cc): settles a pending switch once `summary` reaches its
  // iteration, adds `summary` to the window, and returns the inputs of a check when one is due.
  std::optional<ReplanCheck> ObserveForReplanLocked(JobRecord& job, const IterationSummary& summary)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `proposal` to every rank when it beats the running plan by the spec's threshold and the
  // job still runs `check.plan`.
  void MaybeSwitchLocked(JobRecord& job, const ReplanCheck& check, ReplanProposal proposal)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendPlanSwitchLocked(JobRecord& job, PlanSwitchEvent event, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan of RUNNING job `job_id` (null when it has none) when `worker_name` holds the rank
  // `stats` is about; nullopt when the report is not from the rank's holder.
  std::optional<std::shared_ptr<const JobPlan>> HolderPlan(const std::string& worker_name,
                                                           const std::string& job_id,
                                                           const RankStats& stats) const
      ABSL_LOCKS_EXCLUDED(mu_);

  Clock& clock_;
  JobStore& store_;
  Metrics& metrics_;
  const ManagerOptions options_;
  RunMonitor monitor_;  // thread-safe; its locks come after mu_
  Rendezvous rendezvous_;
  JobEventLog events_;
  JobLogStore logs_;

  mutable absl::Mutex mu_;
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, JobRuntime> runtime_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  Recovery recovery_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Jobs whose latest change the store refused, and its latest error (OK when none).
  absl::flat_hash_set<std::string> unsaved_ ABSL_GUARDED_BY(mu_);
  absl::Status store_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_MANAGER_H_
