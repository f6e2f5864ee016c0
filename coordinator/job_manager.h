// JobManager: the coordinator's logic on domain types; the gRPC services are thin adapters over
// it. It is a facade: each operation is carried out by one component, each with its own header,
// and this class only wires them up and keeps the API in one place.
//   JobLifecycle    the job state machine and scheduling; owns the lock of the state below
//     JobQueue        job records in submission order; FIFO per device kind
//     WorkerRegistry  registrations, sessions, heartbeats, worker states
//     Recovery        lost ranks, restarts, failure grace, reconciliation after a restart
//   JobAdmission    Submit: checks, idempotent resubmits, pending limits, store before ack
//   WorkerSessions  registration, sessions, heartbeats, leaving, liveness
//   RankReports     iteration reports, a rank's end or failure; re-plan checks
//   ModelProfiling  a TorchScript model's blocks timed, its cuts chosen, then dispatched
//   JobPlans        each job's plan and its re-planning (own lock)
//   JobStoreWriter  store writes, and what the store refused until it takes it (own lock)
//   RunMonitor, Rendezvous, JobEventLog, JobLogStore   (own locks)
// Lock order: JobLifecycle::mu() first, then JobPlans', then the leaves (JobStoreWriter,
// RunMonitor, Rendezvous, JobEventLog, JobLogStore, Metrics); no component calls back up while
// holding its lock. Progress ingest takes only RunMonitor's.
//
// Thread-safe. Collaborators (clock, store, metrics) are injected and must outlive the manager.
#ifndef ZPIPE_COORDINATOR_JOB_MANAGER_H_
#define ZPIPE_COORDINATOR_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_admission.h"
#include "coordinator/job_events.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_log_store.h"
#include "coordinator/job_manager_types.h"
#include "coordinator/job_plans.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_writer.h"
#include "coordinator/metrics.h"
#include "coordinator/model_profiling.h"
#include "coordinator/planner.h"
#include "coordinator/rank_reports.h"
#include "coordinator/rendezvous.h"
#include "coordinator/run_monitor.h"
#include "coordinator/worker_connection.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_sessions.h"

namespace zpipe::coordinator {

class JobManager {
 public:
  JobManager(Clock& clock, JobStore& store, Metrics& metrics, ManagerOptions options);
  ~JobManager();

  // Restores jobs from the store (reconciliation: recovery.h); call once before serving.
  // Shutdown() leaves running jobs alone: the next coordinator picks them up this way.
  absl::Status Load();

  // ---- client-facing ----
  // `job_id` empty = generate one. See SubmitJob in coordinator.proto for idempotency; specs are
  // compared with their defaults resolved (spec_defaults.h), which is also how the job is stored
  // and returned (validate_only too). A resubmit by another submitter is ALREADY_EXISTS.
  // `submitted_by` is recorded with the job. ResourceExhausted for a new job while
  // max_pending_jobs are PENDING, or max_pending_jobs_per_client of a non-empty `submitted_by`.
  // When the store cannot save the new job, or still holds back earlier changes (StoreStatus),
  // the job is refused and forgotten (nothing unsaved is acknowledged): ResourceExhausted when
  // the store is full, Unavailable for other store errors.
  absl::StatusOr<SubmitResult> Submit(std::string job_id, const JobSpec& spec, bool validate_only,
                                      std::string submitted_by = "");
  // Who submitted the job (JobRecord::submitted_by). NotFound for an unknown job.
  absl::StatusOr<std::string> SubmittedBy(const std::string& job_id) const;
  // Makes the job's plan on first use after a restart (for its predicted statistics).
  absl::StatusOr<JobView> Get(const std::string& job_id, bool with_microbatches = true);
  // The jobs `filter` matches (JobQueue::Page), oldest first, a page at a time: page_size 0 =
  // 100, capped at 1000; the filter applies before paging.
  absl::StatusOr<ListResult> List(const JobFilter& filter, int page_size,
                                  const std::string& page_token) const;
  // Acknowledged once CANCELLED is stored: while the store refuses it, the job is cancelled (its
  // workers stopped) but the store's error is returned; cancelling again answers OK once stored.
  absl::StatusOr<JobView> Cancel(const std::string& job_id, std::string reason);
  // Deletes a finished job with everything kept about it: its stored record, history, plan,
  // progress, trace and logs (its artifacts are then no longer needed by it: ArtifactStore::
  // Sweep). A job that is not finished is FailedPrecondition unless `force`, which cancels it
  // first. Acknowledged once the store has removed it: while the store refuses, the job is kept
  // (cancelled when forced) and the store's error is returned. NotFound for an unknown job.
  // Returns the state the job was deleted in.
  absl::StatusOr<JobState> Delete(const std::string& job_id, bool force);
  std::vector<WorkerInfo> Workers(bool include_dead) const;
  // A page of Workers by name: page_size 0 = 500, capped at 1000; `page_token` from the previous
  // page's next_page_token.
  WorkerPage WorkersPage(bool include_dead, int page_size, const std::string& page_token) const;
  // The executed timeline of `iteration` (nullopt = the latest complete one); see
  // TraceStore::Get for the errors.
  absl::StatusOr<TraceView> Trace(const std::string& job_id, std::optional<int> iteration);
  // The job's plan (made on first use after a restart). FailedPrecondition when it cannot be
  // made (the job FAILED for that reason).
  absl::StatusOr<std::shared_ptr<const JobPlan>> Plan(const std::string& job_id);

  // ---- worker-facing (worker_sessions.h, rank_reports.h, model_profiling.h) ----
  // AlreadyExists while another connected worker holds the name, unless `registration` carries
  // that worker's instance_id (the same process reconnecting); see worker.proto "Identity". A
  // worker claiming the rank it holds in a RUNNING job (running_job_*) resumes it.
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
  // The manager's clock, for sessions stamping what they hear (WorkerConnection::Heard).
  absl::Time Now() const { return clock_.Now(); }
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
  // `peer_lost`: the rank failed because its connection to a peer broke (an effect); a failure
  // of another rank's own, reported while it waits, is blamed instead.
  absl::Status RankFailed(const std::string& worker_id, const std::string& job_id,
                          int pipeline_rank, int data_rank, const std::string& message,
                          bool permanent = false, bool peer_lost = false);
  // A worker's answer to a kProfile command: the job's cuts are chosen from `blocks` (or kept
  // from `checkpoint_cuts`), the plan is made from the measured costs and the assignments go
  // out; a non-empty `error` fails the job with it.
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
  // did not come back after a restart; writes unsaved jobs to the store again; deletes finished
  // jobs past the retention (ManagerOptions::retain_finished, retain_count). Call periodically.
  void CheckLiveness();
  // OK while every job change is stored; else the store's error (ResourceExhausted when it is
  // full) saying how many jobs wait to be written (job_store_writer.h). For /readyz and submits.
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
  // FailedPrecondition or NotFound for a job whose rendezvous store is closed.
  absl::Status ClosedRendezvous(const std::string& job_id) const;
  // Makes the plan of a job that has none yet (a finished job loaded from the store, on its first
  // read) without the lifecycle lock: its search takes up to the job's search budget.
  void MakePlan(const std::string& job_id) ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

  Clock& clock_;
  JobStore& store_;
  const ManagerOptions options_;
  // Leaves, each with its own lock.
  RunMonitor monitor_;
  Rendezvous rendezvous_;
  JobEventLog events_;
  JobLogStore logs_;
  JobStoreWriter writer_;
  JobPlans plans_;
  // The state under one lock, and the components that work on it.
  JobLifecycle lifecycle_;
  JobAdmission admission_;
  WorkerSessions sessions_;
  RankReports reports_;
  ModelProfiling profiling_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_MANAGER_H_
