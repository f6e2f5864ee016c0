// JobManager: job lifecycle, scheduling and the client-facing operations.
// Worker-facing operations, liveness and rendezvous are in job_manager_workers.cc.
#include "coordinator/job_manager.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/spec_defaults.h"
#include "coordinator/spec_validator.h"
#include "coordinator/worker_match.h"
#include "coordinator/worker_registry.h"
#include "util/log.h"

namespace zpipe::coordinator {
namespace {

std::string GenerateJobId(absl::Time now) {
  static std::atomic<uint32_t> counter{0};
  return absl::StrFormat("job-%x-%d", absl::ToUnixSeconds(now), counter.fetch_add(1));
}

}  // namespace

JobManager::JobManager(Clock& clock, JobStore& store, Metrics& metrics, ManagerOptions options)
    : clock_(clock),
      store_(store),
      metrics_(metrics),
      options_(options),
      // A half-reported iteration waits as long as one of its ranks may be away and still come
      // back: the recovery grace after a restart, plus a heartbeat timeout of silence.
      monitor_(metrics, ProgressTracker::Options{
                            .keep_pending = options.recovery_grace + options.heartbeat_timeout,
                            .max_pending = ProgressTracker::Options().max_pending}),
      rendezvous_(options.rendezvous),
      logs_(options.log_lines_per_rank),
      recovery_(options.failure_grace, options.recovery_grace) {}

JobManager::~JobManager() = default;

absl::Status JobManager::Load() {
  absl::StatusOr<std::vector<JobRecord>> loaded = store_.LoadAll();
  if (!loaded.ok()) return loaded.status();
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  int running = 0;
  for (JobRecord& rec : *loaded) {
    const std::string id = rec.id;
    // Jobs stored by a coordinator before defaults were resolved at submit hold the raw spec.
    rec.spec = ResolveSpecDefaults(std::move(rec.spec));
    events_.Open(id, rec.last_sequence);
    if (!IsTerminal(rec.state)) rendezvous_.Open(id);
    JobRecord& job = queue_.Add(std::move(rec));
    if (std::optional<std::string> requeue = recovery_.Reconcile(job, now)) {
      SetStateLocked(job, JobState::kPending, *std::move(requeue));
    } else if (job.state == JobState::kRunning) {
      ++running;
      if (std::shared_ptr<const JobPlan> plan = PlanForLocked(job)) {
        // Progress resumes at the stored count; the workers' buffered reports fill in the rest.
        monitor_.StartJob(id, job.spec, *plan, job.ranks, job.iterations_done);
      }
    }
  }
  LogInfo("loaded ", queue_.all().size(), " jobs from the store; ", running,
          " RUNNING jobs wait up to ", absl::FormatDuration(options_.recovery_grace),
          " for their workers to reconnect");
  UpdateGaugesLocked();
  return absl::OkStatus();
}

absl::StatusOr<SubmitResult> JobManager::Submit(std::string job_id, const JobSpec& submitted,
                                                bool validate_only, std::string submitted_by) {
  if (job_id.empty() && !validate_only) job_id = GenerateJobId(clock_.Now());
  if (!job_id.empty()) {
    if (absl::Status st = ValidateJobId(job_id); !st.ok()) return st;
  }
  // A store that holds back earlier changes would not keep this job either.
  auto store_refusal = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (unsaved_.empty() || RetryUnsavedLocked().ok()) return absl::OkStatus();
    return absl::Status(StoreStatusLocked().code(),
                        absl::StrCat("job '", job_id, "' was not created: ",
                                     StoreStatusLocked().message()));
  };
  if (absl::Status st = ValidateSpecFields(submitted); !st.ok()) return st;
  // From here on the job is its resolved spec: what is stored, shown and compared on a resubmit,
  // so a spec as a client printed it (defaults filled) is the same job as the file it came from.
  const JobSpec spec = ResolveSpecDefaults(submitted);

  auto pending_limit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    const int pending = queue_.PendingCount();
    if (pending >= options_.max_pending_jobs) {
      return absl::ResourceExhaustedError(
          absl::StrCat(pending, " jobs are pending (the --max-pending-jobs limit of ",
                       options_.max_pending_jobs, "); wait or cancel some"));
    }
    return absl::OkStatus();
  };
  // One identity may not fill the queue for everyone. Without token files every caller is the
  // same anonymous "" and only the global limit applies.
  auto client_pending_limit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (submitted_by.empty()) return absl::OkStatus();
    int mine = 0;
    for (const auto& [order, job] : queue_.all()) {
      mine += job.state == JobState::kPending && job.submitted_by == submitted_by;
    }
    if (mine < options_.max_pending_jobs_per_client) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        mine, " jobs of '", submitted_by,
        "' are pending (the --max-pending-jobs-per-client limit of ",
        options_.max_pending_jobs_per_client, "); wait or cancel some of yours"));
  };
  auto existing = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<SubmitResult> {
    const JobRecord* job = queue_.Find(job_id);
    if (job == nullptr) return absl::NotFoundError("");
    if (job->submitted_by != submitted_by) {
      return absl::AlreadyExistsError(
          absl::StrCat("job_id: job '", job_id,
                       "' already exists, submitted by someone else; choose another id"));
    }
    if (job->spec == spec) return SubmitResult{ViewLocked(*job, true, true), false};
    return absl::AlreadyExistsError(absl::StrCat(
        "job_id: job '", job_id, "' already exists with a different spec; choose another id"));
  };
  if (!validate_only) {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<SubmitResult> found = existing();
    if (found.ok() || found.status().code() == absl::StatusCode::kAlreadyExists) return found;
    if (absl::Status st = pending_limit(); !st.ok()) return st;  // before the planning work
    if (absl::Status st = client_pending_limit(); !st.ok()) return st;
    if (absl::Status st = store_refusal(); !st.ok()) return st;
  }

  // Planning can take a while for big pipelines: do it outside the lock.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(spec);
  if (!plan.ok()) return plan.status();
  if (validate_only) {
    SubmitResult result;
    result.job.record.id = job_id;
    result.job.record.spec = spec;
    result.job.plan = *plan;
    return result;
  }

  absl::MutexLock lock(&mu_);
  absl::StatusOr<SubmitResult> found = existing();  // a concurrent submit of the same id
  if (found.ok() || found.status().code() == absl::StatusCode::kAlreadyExists) return found;
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  if (absl::Status st = pending_limit(); !st.ok()) return st;
  if (absl::Status st = client_pending_limit(); !st.ok()) return st;
  if (absl::Status st = store_refusal(); !st.ok()) return st;

  JobRecord rec;
  rec.id = job_id;
  rec.spec = spec;
  rec.state = JobState::kPending;
  rec.reason = WaitingReason(spec, 0, {});
  rec.create_time = clock_.Now();
  rec.submitted_by = std::move(submitted_by);
  rec.submit_order = queue_.NextSubmitOrder();
  // Stored before it exists in memory, so a client never holds an id a restart would lose.
  if (absl::Status st = store_.Put(rec); !st.ok()) {
    LogError("job ", job_id, ": store write failed, submit refused: ", st.ToString());
    metrics_.CountStoreWriteError();
    if (absl::IsResourceExhausted(st)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator's job store is full and could not save job '", job_id, "' (",
          st.message(), "); the job was not created. Free space on the disk of the coordinator's "
          "--db and submit again"));
    }
    return absl::UnavailableError(absl::StrCat("the job store could not save job '", job_id,
                                               "': ", st.message(), "; the job was not created"));
  }
  JobRecord& job = queue_.Add(std::move(rec));
  runtime_[job_id].plan = *plan;
  events_.Open(job_id, 0);
  rendezvous_.Open(job_id);
  LogInfo("job ", job_id, ": submitted '", spec.name, "' (", spec.schedule, ", p=", spec.pipeline,
          " d=", spec.data_parallel(), " m=", spec.microbatches, ", ", spec.iterations,
          " iterations, ", DeviceKindName(spec.device), ") -> PENDING");
  TryScheduleLocked();
  UpdateGaugesLocked();
  return SubmitResult{ViewLocked(job, true, true), true};
}

absl::StatusOr<JobView> JobManager::Get(const std::string& job_id, bool with_microbatches) {
  {
    absl::ReaderMutexLock lock(&mu_);
    const JobRecord* job = queue_.Find(job_id);
    if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
    auto rt = runtime_.find(job_id);
    if (rt != runtime_.end() && (rt->second.plan || rt->second.plan_failed)) {
      return ViewLocked(*job, true, with_microbatches);
    }
  }
  // Loaded from the store without a plan yet: make it once, under the writer lock.
  absl::MutexLock lock(&mu_);
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  PlanForLocked(*job);
  return ViewLocked(*job, true, with_microbatches);
}

absl::StatusOr<ListResult> JobManager::List(const std::set<JobState>& states, int page_size,
                                            const std::string& page_token) const {
  if (page_size < 0) return absl::InvalidArgumentError("page_size: must be >= 0");
  page_size = page_size == 0 ? 100 : std::min(page_size, 1000);
  int64_t after = 0;
  if (!page_token.empty() && (!absl::SimpleAtoi(page_token, &after) || after < 0)) {
    return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
  }
  ListResult result;
  absl::ReaderMutexLock lock(&mu_);
  bool more = false;
  for (const JobRecord* job : queue_.Page(states, after, page_size, &more)) {
    result.jobs.push_back(ViewLocked(*job, true, false));
  }
  if (more) result.next_page_token = absl::StrCat(result.jobs.back().record.submit_order);
  return result;
}

absl::StatusOr<std::string> JobManager::SubmittedBy(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  const JobRecord* job = queue_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  return job->submitted_by;
}

absl::StatusOr<JobView> JobManager::Cancel(const std::string& job_id, std::string reason) {
  absl::MutexLock lock(&mu_);
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  // Acknowledged only once stored (a retry of a cancel the store refused lands here too).
  auto stored = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::StatusOr<JobView> {
    if (unsaved_.contains(job_id)) {
      if (absl::Status st = StoreLocked(*job); !st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("job '", job_id, "' is cancelled but the coordinator's "
                                         "job store refused to save it (", st.message(),
                                         "); it retries, cancel again to check. ",
                                         StoreStatusLocked().message()));
      }
    }
    return ViewLocked(*job, true, true);
  };
  if (job->state == JobState::kCancelled) return stored();
  if (IsTerminal(job->state)) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' already ",
                                                      JobStateName(job->state),
                                                      "; only active jobs can be cancelled"));
  }
  if (reason.empty()) reason = "cancelled by user";
  FinishJobLocked(*job, JobState::kCancelled, std::move(reason));
  return stored();
}

absl::StatusOr<std::shared_ptr<const JobPlan>> JobManager::Plan(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  std::shared_ptr<const JobPlan> plan = PlanForLocked(*job);
  if (!plan) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' has no plan"));
  }
  return plan;
}

std::vector<WorkerInfo> JobManager::Workers(bool include_dead) const {
  absl::ReaderMutexLock lock(&mu_);
  return workers_.List(include_dead);
}

// ---------------------------------------------------------------------------------------------

JobView JobManager::ViewLocked(const JobRecord& job, bool with_progress,
                               bool with_microbatches) const {
  JobView view;
  view.record = job;
  if (auto rt = runtime_.find(job.id); rt != runtime_.end()) view.plan = rt->second.plan;
  if (with_progress && job.state != JobState::kPending) {
    view.progress = monitor_.Progress(job.id, with_microbatches);
    // The stored count is a floor: a job restored from the store without its progress (a
    // finished one) or before its ranks report again never shows fewer iterations done.
    if (!view.progress && job.iterations_done > 0) {
      view.progress.emplace();
      view.progress->iterations_total = job.spec.iterations;
      view.progress->iteration = std::min(job.iterations_done, job.spec.iterations - 1);
    }
    if (view.progress) {
      view.progress->iterations_done = std::max(view.progress->iterations_done,
                                                job.iterations_done);
    }
  }
  if (job.state == JobState::kPending) view.queue_position = queue_.QueuePosition(job);
  return view;
}

void JobManager::SetStateLocked(JobRecord& job, JobState to, std::string reason) {
  const JobState from = job.state;
  const absl::Time now = clock_.Now();
  job.state = to;
  job.reason = std::move(reason);
  if (to == JobState::kRunning) job.start_time = now;
  if (IsTerminal(to)) job.end_time = now;
  JobEvent event;
  event.sequence = ++job.last_sequence;
  event.time = now;
  event.kind = JobEvent::Kind::kStateChange;
  event.from = from;
  event.to = to;
  event.reason = job.reason;
  events_.Append(job.id, std::move(event));
  PersistLocked(job);
  LogInfo("job ", job.id, ": ", JobStateName(from), " -> ", JobStateName(to), " (", job.reason,
          ")");
  UpdateGaugesLocked();
}

void JobManager::FinishJobLocked(JobRecord& job, JobState to, std::string reason) {
  Recovery::CloseAttempt(job, reason, clock_.Now());
  SetStateLocked(job, to, std::move(reason));
  metrics_.JobFinished(job.id, clock_.Now());
  ReleaseWorkersLocked(job, /*cancel=*/to != JobState::kSucceeded);
  rendezvous_.Close(job.id);
  if (auto rt = runtime_.find(job.id); rt != runtime_.end()) rt->second.finished.clear();
  recovery_.Finished(job.id);
  TryScheduleLocked();
  UpdateGaugesLocked();
}

void JobManager::LoseRankLocked(JobRecord& job, std::string reason) {
  Recovery::Decision decision = recovery_.OnRankLost(job, std::move(reason), clock_.Now());
  if (!decision.restart) {
    FinishJobLocked(job, JobState::kFailed, std::move(decision.reason));
    return;
  }
  ReleaseWorkersLocked(job, /*cancel=*/true);
  runtime_[job.id].finished.clear();
  // A switch sent to the previous attempt's ranks never happens; this attempt runs `plan`.
  runtime_[job.id].pending.reset();
  runtime_[job.id].replan_window = ReplanWindow{};
  metrics_.JobRestarted(job.id);
  SetStateLocked(job, JobState::kRestarting, std::move(decision.reason));
  // Its workers are not idle until their heartbeats say the attempt is torn down; the liveness
  // loop schedules the job once the backoff is over.
  TryScheduleLocked();
  UpdateGaugesLocked();
}

void JobManager::ReleaseWorkersLocked(JobRecord& job, bool cancel) {
  std::vector<std::string> names;
  for (const RankSlot& slot : job.ranks) names.push_back(slot.worker_name);
  workers_.Release(job.id, names, cancel, job.reason);
}

void JobManager::TryScheduleLocked() {
  if (shut_down_) return;
  const absl::Time now = clock_.Now();
  // Called back, still under mu_, for each waiting job in queue order.
  queue_.Schedule([&](JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool restarting = job.state == JobState::kRestarting;
    if (restarting && recovery_.HeldBack(job.id, now)) return false;  // the backoff holds it
    std::vector<const WorkerRegistration*> live;
    std::vector<RegisteredWorker*> idle = workers_.IdleFor(job.spec.device, &live);
    if (static_cast<int>(idle.size()) < job.spec.world_size()) {
      const std::string waiting = WaitingReason(job.spec, static_cast<int>(idle.size()), live);
      job.reason =
          restarting ? absl::StrCat(recovery_.RestartReason(job.id), "; ", waiting) : waiting;
      return false;
    }
    idle.resize(job.spec.world_size());
    ScheduleJobLocked(job, std::move(idle));
    return true;
  });
}

bool JobManager::ScheduleJobLocked(JobRecord& job, std::vector<RegisteredWorker*> workers) {
  if (NeedsProfile(job)) {
    ReserveLocked(job, workers);
    JobRuntime& rt = runtime_[job.id];
    rt.profiling_worker = workers[0]->info.registration.name;
    SetStateLocked(job, JobState::kScheduling,
                   absl::StrCat("attempt ", job.attempt, ": timing the model's blocks on ",
                                rt.profiling_worker, " to balance the stages"));
    auto request = std::make_shared<AssignmentData>();
    request->job_id = job.id;
    request->spec = job.spec;
    request->attempt = job.attempt;
    WorkerCommand cmd;
    cmd.kind = WorkerCommand::Kind::kProfile;
    cmd.assignment = std::move(request);
    workers[0]->connection->Send(std::move(cmd));
    return true;
  }
  std::shared_ptr<const JobPlan> plan = PlanForLocked(job);
  if (!plan) {
    // Cannot happen for a job whose spec was accepted by this build; fail it rather than loop.
    SetStateLocked(job, JobState::kFailed, "the plan could not be generated (see coordinator log)");
    rendezvous_.Close(job.id);
    return false;
  }
  ReserveLocked(job, workers);
  DispatchLocked(job, workers, std::move(plan));
  return true;
}

void JobManager::ReserveLocked(JobRecord& job, const std::vector<RegisteredWorker*>& workers) {
  const int p = job.spec.pipeline, d = job.spec.data_parallel();
  ++job.attempt;
  job.ranks.clear();
  std::string names;
  for (int g = 0; g < p * d; ++g) {
    RegisteredWorker& w = *workers[g];
    RankSlot slot{g % p, g / p, w.info.registration.name, w.info.registration.host,
                  w.info.registration.device_index};
    WorkerRegistry::Reserve(w, job.id, slot.pipeline_rank, slot.data_rank);
    absl::StrAppend(&names, g == 0 ? "" : ", ", slot.worker_name);
    job.ranks.push_back(std::move(slot));
  }
  JobAttemptRecord attempt;
  attempt.attempt = job.attempt;
  attempt.start_time = clock_.Now();
  for (const RankSlot& slot : job.ranks) attempt.workers.push_back(slot.worker_name);
  job.attempts.push_back(std::move(attempt));
  recovery_.Scheduled(job.id);
  SetStateLocked(job, JobState::kScheduling,
                 absl::StrCat("attempt ", job.attempt, " on workers ", names));
}

void JobManager::DispatchLocked(JobRecord& job, const std::vector<RegisteredWorker*>& workers,
                                std::shared_ptr<const JobPlan> plan) {
  const int p = job.spec.pipeline, d = job.spec.data_parallel();
  // The workers run with the cuts chosen for the job (its spec, as submitted, may have none).
  JobSpec run_spec = job.spec;
  if (auto* ts = std::get_if<TorchScriptConfig>(&run_spec.model); ts != nullptr) {
    if (!job.layout) job.layout = ModelLayout{"spec", ts->cuts, {}, 0};
    ts->cuts = job.layout->cuts;
  }
  monitor_.StartJob(job.id, job.spec, *plan, job.ranks);
  runtime_[job.id].finished.clear();
  recovery_.Dispatched(job.id);
  for (int g = 0; g < p * d; ++g) {
    auto a = std::make_shared<AssignmentData>();
    a->job_id = job.id;
    a->spec = run_spec;
    a->attempt = job.attempt;
    a->self = job.ranks[g];
    a->pipeline_size = p;
    a->data_size = d;
    a->plan = plan;
    a->peers = job.ranks;
    a->rendezvous_prefix = absl::StrCat(job.id, "/a", job.attempt, "/");
    WorkerCommand cmd;
    cmd.kind = WorkerCommand::Kind::kAssign;
    cmd.assignment = std::move(a);
    workers[g]->connection->Send(std::move(cmd));
  }
  SetStateLocked(job, JobState::kRunning, absl::StrCat("assignments sent to ", p * d, " workers"));
}

std::shared_ptr<const JobPlan> JobManager::PlanForLocked(const JobRecord& job) {
  JobRuntime& rt = runtime_[job.id];
  if (rt.plan || rt.plan_failed) return rt.plan;
  // After a re-plan: the plan the ranks switched to, regenerated from the costs it was made from.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan =
      PlanJob(job.spec, nullptr, job.plan_costs, job.plan_version);
  if (!plan.ok()) {
    rt.plan_failed = true;
    LogError("job ", job.id, ": cannot make its plan: ", plan.status().ToString());
    return nullptr;
  }
  rt.plan = *plan;
  return rt.plan;
}

absl::Status JobManager::StoreLocked(const JobRecord& job) {
  absl::Status st = store_.Put(job);
  if (st.ok()) {
    if (unsaved_.erase(job.id) > 0 && unsaved_.empty()) {
      LogInfo("job store: writes succeed again; every job change is stored");
      store_error_ = absl::OkStatus();
    }
    metrics_.SetStoreUnsavedJobs(static_cast<int64_t>(unsaved_.size()));
    return st;
  }
  metrics_.CountStoreWriteError();
  if (unsaved_.insert(job.id).second) {
    // Once per job, not per retry: the retries repeat it every liveness check.
    LogError("job ", job.id, ": store write failed (", st.ToString(),
             "); kept in memory and written again until the store takes it");
  }
  store_error_ = st;
  metrics_.SetStoreUnsavedJobs(static_cast<int64_t>(unsaved_.size()));
  return st;
}

absl::Status JobManager::RetryUnsavedLocked() {
  const std::vector<std::string> ids(unsaved_.begin(), unsaved_.end());
  for (const std::string& id : ids) {
    const JobRecord* job = queue_.Find(id);
    if (job == nullptr) {
      unsaved_.erase(id);
      continue;
    }
    if (absl::Status st = StoreLocked(*job); !st.ok()) return StoreStatusLocked();
  }
  return StoreStatusLocked();
}

absl::Status JobManager::StoreStatus() const {
  absl::ReaderMutexLock lock(&mu_);
  return StoreStatusLocked();
}

absl::Status JobManager::StoreStatusLocked() const {
  if (unsaved_.empty()) return absl::OkStatus();
  const std::string what =
      absl::StrCat(unsaved_.size(), unsaved_.size() == 1 ? " job's latest change waits" :
                                                           " jobs' latest changes wait",
                   " to be written (", store_error_.message(), ")");
  if (absl::IsResourceExhausted(store_error_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordinator's job store is full: ", what,
        "; new jobs are refused until it takes writes again. Free space on the disk of the "
        "coordinator's --db"));
  }
  return absl::UnavailableError(absl::StrCat(
      "the coordinator's job store refuses writes: ", what,
      "; new jobs are refused until it takes writes again"));
}

void JobManager::UpdateGaugesLocked() {
  const std::array<int64_t, std::size(kAllJobStates)> jobs = queue_.CountByState();
  for (JobState s : kAllJobStates) metrics_.SetJobCount(s, jobs[static_cast<int>(s)]);
  const std::array<int64_t, 3> workers = workers_.CountByState();
  for (WorkerState s : kAllWorkerStates) metrics_.SetWorkerCount(s, workers[static_cast<int>(s)]);
}

}  // namespace zpipe::coordinator
