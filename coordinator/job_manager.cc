// JobManager: the facade's wiring, the client-facing reads and the rendezvous front. Everything
// else is one call into the component that owns it (job_manager.h lists them).
#include "coordinator/job_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {
namespace {

absl::Status JobNotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
}

}  // namespace

JobManager::JobManager(Clock& clock, JobStore& store, Metrics& metrics, ManagerOptions options)
    : clock_(clock),
      store_(store),
      options_(std::move(options)),
      // A half-reported iteration waits as long as one of its ranks may be away and still come
      // back: the recovery grace after a restart, plus a heartbeat timeout of silence.
      monitor_(metrics,
               ProgressTracker::Options{
                   .keep_pending = options_.recovery_grace + options_.heartbeat_timeout,
                   .max_pending = ProgressTracker::Options().max_pending}),
      rendezvous_(options_.rendezvous),
      logs_(options_.log_lines_per_rank),
      writer_(store, events_, metrics),
      plans_(clock, metrics, monitor_, events_),
      lifecycle_(clock, metrics, options_, writer_, plans_, monitor_, rendezvous_, events_),
      admission_(clock, options_, lifecycle_, writer_),
      sessions_(clock, metrics, options_, lifecycle_, writer_),
      reports_(clock, lifecycle_, plans_, monitor_, events_, logs_),
      profiling_(lifecycle_, plans_) {}

JobManager::~JobManager() = default;

absl::Status JobManager::Load() {
  absl::StatusOr<std::vector<JobRecord>> loaded = store_.LoadAll();
  if (!loaded.ok()) return loaded.status();
  std::vector<std::vector<JobEvent>> events;
  events.reserve(loaded->size());
  for (const JobRecord& job : *loaded) {
    absl::StatusOr<std::vector<JobEvent>> stored = store_.LoadEvents(job.id);
    if (!stored.ok()) return stored.status();
    events.push_back(*std::move(stored));
    writer_.Stored(job.id, job.last_sequence);
  }
  lifecycle_.Restore(*std::move(loaded), std::move(events));
  return absl::OkStatus();
}

// ---- client-facing ----

absl::StatusOr<SubmitResult> JobManager::Submit(std::string job_id, const JobSpec& spec,
                                                bool validate_only, std::string submitted_by) {
  return admission_.Submit(std::move(job_id), spec, validate_only, std::move(submitted_by));
}

absl::StatusOr<std::string> JobManager::SubmittedBy(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&lifecycle_.mu());
  const JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  return job->submitted_by;
}

absl::StatusOr<JobView> JobManager::Get(const std::string& job_id, bool with_microbatches) {
  MakePlan(job_id);
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  const JobRecord* job = lifecycle.queue().Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  return lifecycle.View(*job, true, with_microbatches);
}

absl::StatusOr<ListResult> JobManager::List(const JobFilter& filter, int page_size,
                                            const std::string& page_token) const {
  if (page_size < 0) return absl::InvalidArgumentError("page_size: must be >= 0");
  page_size = page_size == 0 ? 100 : std::min(page_size, 1000);
  int64_t after = 0;
  if (!page_token.empty() && (!absl::SimpleAtoi(page_token, &after) || after < 0)) {
    return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
  }
  ListResult result;
  absl::ReaderMutexLock lock(&lifecycle_.mu());
  bool more = false;
  for (const JobRecord* job : lifecycle_.queue().Page(filter, after, page_size, &more)) {
    result.jobs.push_back(lifecycle_.View(*job, true, false));
  }
  if (more) result.next_page_token = absl::StrCat(result.jobs.back().record.submit_order);
  return result;
}

absl::StatusOr<JobView> JobManager::Cancel(const std::string& job_id, std::string reason) {
  absl::MutexLock lock(&lifecycle_.mu());
  JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  if (IsTerminal(job->state) && job->state != JobState::kCancelled) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' already ",
                                                      JobStateName(job->state),
                                                      "; only active jobs can be cancelled"));
  }
  if (job->state != JobState::kCancelled) {
    lifecycle_.Finish(*job, JobState::kCancelled,
                      reason.empty() ? "cancelled by user" : std::move(reason));
  }
  // Acknowledged only once stored (a retry of a cancel the store refused lands here too).
  if (writer_.IsUnsaved(job_id)) {
    if (absl::Status st = lifecycle_.Store(*job); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("job '", job_id,
                                                  "' is cancelled but the coordinator's job store "
                                                  "refused to save it (",
                                                  st.message(),
                                                  "); it retries, cancel "
                                                  "again to check. ",
                                                  writer_.Status().message()));
    }
  }
  return lifecycle_.View(*job, true, true);
}

absl::StatusOr<JobState> JobManager::Delete(const std::string& job_id, bool force) {
  JobState state;
  {
    absl::MutexLock lock(&lifecycle_.mu());
    JobRecord* job = lifecycle_.queue().Find(job_id);
    if (job == nullptr) return JobNotFound(job_id);
    if (!IsTerminal(job->state)) {
      if (!force) {
        return absl::FailedPreconditionError(
            absl::StrCat("job '", job_id, "' is ", JobStateName(job->state),
                         "; add --force to cancel it and delete it"));
      }
      lifecycle_.Finish(*job, JobState::kCancelled, "cancelled to be deleted");
    }
    state = job->state;
    if (absl::Status st = lifecycle_.Delete(*job); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("job '", job_id,
                                       "' is not deleted: the coordinator's job store refused to "
                                       "remove it (",
                                       st.message(), "); delete it again later"));
    }
  }
  // Outside the lifecycle's lock: the log store is a leaf, but needs nothing from it.
  logs_.Forget(job_id);
  return state;
}

std::vector<WorkerInfo> JobManager::Workers(bool include_dead) const {
  return sessions_.List(include_dead);
}

WorkerPage JobManager::WorkersPage(bool include_dead, int page_size,
                                   const std::string& page_token) const {
  return sessions_.ListPage(include_dead, page_size <= 0 ? 500 : std::min(page_size, 1000),
                            page_token);
}

absl::StatusOr<TraceView> JobManager::Trace(const std::string& job_id,
                                            std::optional<int> iteration) {
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = Plan(job_id);
  if (!plan.ok() && plan.status().code() == absl::StatusCode::kNotFound) return plan.status();
  absl::StatusOr<JobTrace> trace = monitor_.Trace(job_id, iteration);
  if (!trace.ok()) return trace.status();
  TraceView view;
  view.trace = *std::move(trace);
  if (plan.ok()) view.plan = *plan;
  return view;
}

void JobManager::MakePlan(const std::string& job_id) {
  const JobLifecycle& lifecycle = lifecycle_;
  std::optional<JobRecord> job;
  {
    absl::ReaderMutexLock lock(&lifecycle.mu());
    const JobRecord* found = lifecycle.queue().Find(job_id);
    if (found == nullptr || plans_.Known(job_id)) return;
    job = *found;
  }
  plans_.For(*job);
  // A job deleted meanwhile keeps no plan (one submitted again under its id has its own: For
  // keeps the plan stored first, and Admit replaces any).
  absl::ReaderMutexLock lock(&lifecycle.mu());
  if (lifecycle.queue().Find(job_id) == nullptr) plans_.Forget(job_id);
}

absl::StatusOr<std::shared_ptr<const JobPlan>> JobManager::Plan(const std::string& job_id) {
  MakePlan(job_id);
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  const JobRecord* job = lifecycle.queue().Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  std::shared_ptr<const JobPlan> plan = plans_.Find(job_id);
  if (!plan) return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' has no plan"));
  return plan;
}

// ---- worker-facing ----

absl::StatusOr<RegisterResult> JobManager::RegisterWorker(const WorkerRegistration& registration) {
  return sessions_.Register(registration);
}

absl::Status JobManager::AttachSession(const std::string& worker_id, const std::string& instance_id,
                                       WorkerConnection* connection) {
  return sessions_.Attach(worker_id, instance_id, connection);
}

void JobManager::DetachSession(const std::string& worker_id, WorkerConnection* connection) {
  sessions_.Detach(worker_id, connection);
}

absl::Status JobManager::CheckAssigned(const std::string& worker_name,
                                       const std::string& job_id) const {
  return sessions_.CheckAssigned(worker_name, job_id);
}

absl::Status JobManager::CheckAssignedInstance(const std::string& instance_id,
                                               const std::string& job_id) const {
  return sessions_.CheckAssignedInstance(instance_id, job_id);
}

absl::Status JobManager::Heartbeat(const std::string& worker_id, const std::string& running_job) {
  return sessions_.Heartbeat(worker_id, running_job);
}

void JobManager::ObserveWorkerClock(const std::string& worker_name, double worker_time_s) {
  monitor_.ObserveClock(worker_name, clock_.Now(), worker_time_s);
}

void JobManager::Progress(const std::string& worker_name, const ProgressBatchData& batch) {
  monitor_.AddProgress(worker_name, batch, clock_.Now());
}

absl::Status JobManager::IterationReport(const std::string& worker_id, const std::string& job_id,
                                         int iteration, const RankStats& stats,
                                         std::optional<double> loss,
                                         std::optional<double> eval_loss) {
  return reports_.Iteration(worker_id, job_id, iteration, stats, loss, eval_loss);
}

absl::Status JobManager::RankFinished(const std::string& worker_id, const std::string& job_id,
                                      int pipeline_rank, int data_rank) {
  return reports_.Finished(worker_id, job_id, pipeline_rank, data_rank);
}

void JobManager::WorkerLeaving(const std::string& worker_id, const std::string& reason) {
  sessions_.Leaving(worker_id, reason);
}

absl::Status JobManager::RankFailed(const std::string& worker_id, const std::string& job_id,
                                    int pipeline_rank, int data_rank, const std::string& message,
                                    bool permanent, bool peer_lost) {
  return reports_.Failed(worker_id, job_id, pipeline_rank, data_rank, message, permanent,
                         peer_lost);
}

absl::Status JobManager::ProfileResult(const std::string& worker_id, const std::string& job_id,
                                       int attempt, const std::vector<BlockProfileData>& blocks,
                                       const std::vector<int>& checkpoint_cuts,
                                       const std::string& error) {
  return profiling_.Result(worker_id, job_id, attempt, blocks, checkpoint_cuts, error);
}

absl::StatusOr<std::string> JobManager::WorkerName(const std::string& worker_id) const {
  return sessions_.WorkerName(worker_id);
}

// ---- rendezvous ----

absl::Status JobManager::ClosedRendezvous(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&lifecycle_.mu());
  const JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  return absl::FailedPreconditionError(absl::StrCat(
      "job '", job_id, "' is ", JobStateName(job->state), "; its rendezvous store is closed"));
}

absl::Status JobManager::RendezvousSet(const std::string& job_id, const std::string& key,
                                       std::string value) {
  absl::Status st = rendezvous_.Set(job_id, key, std::move(value));
  if (st.code() == absl::StatusCode::kNotFound && !rendezvous_.IsOpen(job_id)) {
    return ClosedRendezvous(job_id);
  }
  return st;
}

absl::StatusOr<std::string> JobManager::RendezvousGet(const std::string& job_id,
                                                      const std::string& key) const {
  absl::StatusOr<std::string> value = rendezvous_.Get(job_id, key);
  if (!value.ok() && value.status().code() == absl::StatusCode::kNotFound &&
      !rendezvous_.IsOpen(job_id)) {
    return ClosedRendezvous(job_id);
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> JobManager::RendezvousWait(
    const std::string& job_id, const std::vector<std::string>& keys, absl::Time deadline,
    const std::function<bool()>& cancelled) const {
  if (!rendezvous_.IsOpen(job_id)) return ClosedRendezvous(job_id);
  return rendezvous_.Wait(job_id, keys, deadline, cancelled);
}

// ---- housekeeping ----

void JobManager::CheckLiveness() {
  sessions_.CheckLiveness();
  std::vector<std::string> deleted;
  {
    absl::MutexLock lock(&lifecycle_.mu());
    deleted = lifecycle_.DeleteExpired(clock_.Now());
  }
  for (const std::string& id : deleted) logs_.Forget(id);
}

absl::Status JobManager::StoreStatus() const { return writer_.Status(); }

void JobManager::Shutdown() {
  // Workers are not told to stop: their jobs run on, and they reconnect to the next coordinator,
  // which reloads the jobs from the store.
  lifecycle_.Shutdown();
  events_.Close();
  logs_.Close();
}

}  // namespace zpipe::coordinator
