// JobManager: worker registration, sessions, reports, liveness and rendezvous.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager.h"
#include "util/log.h"

namespace zpipe::coordinator {

absl::StatusOr<RegisterResult> JobManager::RegisterWorker(const WorkerRegistration& reg) {
  if (absl::Status st = WorkerRegistry::Validate(reg); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  const absl::Time now = clock_.Now();
  if (absl::Status st = workers_.CheckNameFree(reg); !st.ok()) return st;

  // The rank this name holds in an active job, whether from the live registry or (after a
  // coordinator restart) only from the job records.
  auto [held_job, held_slot] = queue_.ActiveRankOf(reg.name);

  RegisteredWorker& entry = workers_.Add(reg, now);
  RegisterResult result;
  result.worker_id = entry.info.worker_id;

  std::string failure;
  if (held_job != nullptr) {
    const bool claims = reg.running_job_id == held_job->id &&
                        reg.running_pipeline_rank == held_slot->pipeline_rank &&
                        reg.running_data_rank == held_slot->data_rank;
    const int g = held_slot->data_rank * held_job->spec.pipeline + held_slot->pipeline_rank;
    if (claims && held_job->state == JobState::kRunning) {
      // Also when it finished its rank meanwhile (running_job_finished): it then sends its
      // buffered reports and RankFinished again, and the rank completes the usual way.
      result.resume_running_job = true;
      WorkerRegistry::Reserve(entry, held_job->id, held_slot->pipeline_rank, held_slot->data_rank);
      recovery_.Reconnected(held_job->id, g);
      LogInfo("job ", held_job->id, ": ",
              RankName(reg.name, held_slot->pipeline_rank, held_slot->data_rank),
              reg.running_job_finished ? " re-registered; it finished its rank meanwhile"
                                       : " re-registered and continues");
    } else {
      failure = absl::StrCat(RankName(reg.name, held_slot->pipeline_rank, held_slot->data_rank),
                             " re-registered without the job (it restarted and lost its state)");
    }
  } else if (!reg.running_job_id.empty()) {
    LogInfo("worker ", reg.name, ": claims job ", reg.running_job_id,
            " which it does not hold; told to abandon it");
  }
  LogInfo("worker ", reg.name, ": registered (", DeviceKindName(reg.device_kind), ":",
          reg.device_index, " on ", reg.host.empty() ? "?" : reg.host,
          reg.capabilities ? absl::StrCat(", LibTorch ", reg.capabilities->libtorch_version,
                                          reg.capabilities->torch_cuda ? " CUDA" : " CPU-only")
                           : ", no capabilities reported",
          ") as ", result.worker_id);
  if (!failure.empty()) {
    if (held_job->state == JobState::kRunning) {
      LoseRankLocked(*held_job, failure);
    } else {
      FinishJobLocked(*held_job, JobState::kFailed, failure);
    }
  }
  UpdateGaugesLocked();
  return result;
}

absl::Status JobManager::AttachSession(const std::string& worker_id, const std::string& instance_id,
                                       WorkerConnection* connection) {
  absl::MutexLock lock(&mu_);
  if (absl::Status st = workers_.Attach(worker_id, instance_id, connection, clock_.Now());
      !st.ok()) {
    return st;
  }
  TryScheduleLocked();
  UpdateGaugesLocked();
  return absl::OkStatus();
}

void JobManager::DetachSession(const std::string& worker_id, WorkerConnection* connection) {
  absl::MutexLock lock(&mu_);
  RegisteredWorker* w = workers_.Detach(worker_id, connection);
  if (w == nullptr) return;
  // A peer already reported the broken connection: this worker is the rank that went away.
  if (w->info.state == WorkerState::kBusy) {
    JobRecord* job = queue_.Find(w->info.job_id);
    const std::string* pending = recovery_.PendingFailure(w->info.job_id);
    if (job != nullptr && job->state == JobState::kRunning && pending != nullptr) {
      const std::string then = *pending;
      LoseRankLocked(*job, absl::StrCat(RankName(w->info.registration.name, w->info.pipeline_rank,
                                                 w->info.data_rank),
                                        " lost: its session closed; then ", then));
    }
  }
  UpdateGaugesLocked();
}

absl::Status JobManager::Heartbeat(const std::string& worker_id, const std::string& running_job) {
  absl::MutexLock lock(&mu_);
  bool torn_down = false;
  if (absl::Status st = workers_.Heartbeat(worker_id, running_job, clock_.Now(), &torn_down);
      !st.ok()) {
    return st;
  }
  // It finished tearing a job down: it may be what a waiting job needs.
  if (torn_down) TryScheduleLocked();
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::WorkerName(const std::string& worker_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return workers_.NameOf(worker_id);
}

void JobManager::Progress(const std::string& worker_name, const ProgressBatchData& batch) {
  monitor_.AddProgress(worker_name, batch, clock_.Now());
}

void JobManager::ObserveWorkerClock(const std::string& worker_name, double worker_time_s) {
  monitor_.ObserveClock(worker_name, clock_.Now(), worker_time_s);
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

absl::Status JobManager::IterationReport(const std::string& worker_id, const std::string& job_id,
                                         int iteration, const RankStats& stats,
                                         std::optional<double> loss,
                                         std::optional<double> eval_loss) {
  absl::StatusOr<std::string> name = WorkerName(worker_id);
  if (!name.ok()) return name.status();
  // Earlier half-reported iterations (their other reports died with a previous coordinator)
  // come first; the last is this iteration's when the report completed it.
  std::vector<IterationSummary> summaries =
      monitor_.AddReport(job_id, *name, iteration, stats, loss, eval_loss, clock_.Now());
  std::optional<IterationSummary> summary;
  if (!summaries.empty() && summaries.back().iteration == iteration) summary = summaries.back();
  std::optional<double> at_measured_costs;
  if (std::optional<std::shared_ptr<const JobPlan>> plan = HolderPlan(*name, job_id, stats)) {
    // Outside the lock: a simulation of the whole plan, once per completed iteration.
    at_measured_costs = monitor_.ObserveIteration(job_id, iteration, stats, summary, *plan);
  }
  if (summaries.empty()) return absl::OkStatus();
  if (summaries.back().iteration == iteration) {
    summaries.back().predicted_bubble_measured_costs = at_measured_costs;
  }
  std::optional<ReplanCheck> check;
  for (IterationSummary& completed : summaries) {
    absl::MutexLock lock(&mu_);
    JobRecord* job = queue_.Find(job_id);
    if (job == nullptr || IsTerminal(job->state)) return absl::OkStatus();
    events_.Append(job_id, RunMonitor::RecordSummary(*job, std::move(completed), clock_.Now()));
    const IterationSummary& s = *job->latest_summary;
    LogInfo("job ", job_id, ": iteration ", s.iteration, " done in ", s.duration_s, " s (bubble ",
            s.bubble_rate, ", predicted ", s.predicted_bubble_rate,
            s.loss ? absl::StrCat(", loss ", *s.loss) : "",
            s.eval_loss ? absl::StrCat(", eval loss ", *s.eval_loss) : "", ")");
    logs_.AppendJobLine(job_id, clock_.Now(), RunMonitor::IterationLogLine(s));
    // A half-reported iteration lacks ranks' costs: only complete ones feed the re-planner.
    if (job->state == JobState::kRunning && s.iteration == iteration) {
      check = ObserveForReplanLocked(*job, s);
    }
    PersistLocked(*job);
  }
  if (!check) return absl::OkStatus();
  // Outside the lock: generating and simulating two plans.
  absl::StatusOr<ReplanProposal> proposal = ProposeReplan(
      check->spec, *check->plan, check->window, check->layout ? &*check->layout : nullptr);
  if (!proposal.ok()) {
    LogWarning("job ", job_id,
               ": re-plan from measured costs failed: ", proposal.status().message());
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return absl::OkStatus();
  MaybeSwitchLocked(*job, *check, *std::move(proposal));
  return absl::OkStatus();
}

std::optional<JobManager::ReplanCheck> JobManager::ObserveForReplanLocked(
    JobRecord& job, const IterationSummary& summary) {
  JobRuntime& rt = runtime_[job.id];
  if (rt.plan == nullptr) return std::nullopt;
  if (rt.pending && summary.iteration >= rt.pending->switch_iteration) {
    // Every rank ran the switch iteration with one plan (PlanUpdate in worker.proto): the new
    // one when all of them had it in time, else the old one.
    PendingSwitch pending = *std::move(rt.pending);
    rt.pending.reset();
    const int to = pending.proposal.plan->version;
    int switched = 0;
    for (const RankStats& r : summary.ranks) switched += r.plan_version == to;
    PlanSwitchEvent e;
    e.from_version = job.plan_version;
    e.to_version = to;
    e.switch_iteration = pending.switch_iteration;
    e.measured_iteration = pending.measured_iteration;
    e.old_bubble = pending.proposal.old_bubble;
    e.new_bubble = pending.proposal.new_bubble;
    if (switched == static_cast<int>(summary.ranks.size())) {
      e.phase = PlanSwitchEvent::Phase::kApplied;
      job.plan_version = to;
      job.plan_costs = pending.proposal.costs;
      rt.plan = pending.proposal.plan;
      monitor_.SwitchPlan(job.id, *rt.plan);
      LogInfo("job ", job.id, ": plan v", to, " runs on every rank from iteration ",
              pending.switch_iteration);
      AppendPlanSwitchLocked(
          job, e,
          absl::StrCat("every rank runs plan v", to, " from iteration ",
                       pending.switch_iteration + 1, "; ", pending.proposal.reason));
    } else {
      e.phase = PlanSwitchEvent::Phase::kAbandoned;
      const std::string why =
          switched == 0 ? absl::StrCat("a rank had started iteration ",
                                       pending.switch_iteration + 1, " before plan v", to,
                                       " reached it; every rank kept plan v", job.plan_version)
                        : absl::StrCat(switched, " of ", summary.ranks.size(), " ranks ran plan v",
                                       to, " at iteration ", summary.iteration + 1,
                                       " (a bug: switches are atomic)");
      if (switched != 0) LogError("job ", job.id, ": ", why);
      AppendPlanSwitchLocked(job, e, why);
    }
    rt.replan_window = ReplanWindow{};
  }
  if (job.spec.replan_every <= 0 || rt.pending) return std::nullopt;
  AddToWindow(rt.replan_window, summary, job.plan_version);
  if (rt.replan_window.iterations < job.spec.replan_every) return std::nullopt;
  ReplanCheck check;
  check.spec = job.spec;
  check.plan = rt.plan;
  check.layout = job.layout;
  check.window = std::move(rt.replan_window);
  check.attempt = job.attempt;
  check.iteration_seconds = summary.duration_s;
  rt.replan_window = ReplanWindow{};
  return check;
}

void JobManager::MaybeSwitchLocked(JobRecord& job, const ReplanCheck& check,
                                   ReplanProposal proposal) {
  JobRuntime& rt = runtime_[job.id];
  if (rt.plan != check.plan || rt.pending || job.attempt != check.attempt) return;
  // A floor under a zero threshold: float noise is no reason to move every rank.
  constexpr double kMinGain = 1e-6;
  const double threshold = job.spec.replan_threshold_or_default();
  if (!(proposal.old_bubble - proposal.new_bubble > std::max(threshold, kMinGain)) ||
      proposal.plan->text == rt.plan->text) {
    LogInfo("job ", job.id, ": re-plan check kept plan v", job.plan_version, " (", proposal.reason,
            "; threshold ", threshold, ")");
    return;
  }
  const int measured = check.window.last_iteration;
  const int at = SwitchIteration(measured, check.iteration_seconds);
  if (at >= job.spec.iterations) {
    LogInfo("job ", job.id, ": a better plan (", proposal.reason, ") comes too late to switch");
    return;
  }
  // Every rank must get the plan: one that never answers makes the others fail at the switch.
  for (const RankSlot& slot : job.ranks) {
    const RegisteredWorker* w = workers_.ByName(slot.worker_name);
    if (w == nullptr || w->connection == nullptr) {
      LogInfo("job ", job.id, ": re-plan deferred, worker ", slot.worker_name, " is not connected");
      return;
    }
  }
  PendingSwitch pending;
  pending.switch_iteration = at;
  pending.measured_iteration = measured;
  pending.proposal = std::move(proposal);
  const std::shared_ptr<const JobPlan>& plan = pending.proposal.plan;
  for (const RankSlot& slot : job.ranks) {
    RegisteredWorker* w = workers_.ByName(slot.worker_name);
    WorkerCommand cmd;
    cmd.kind = WorkerCommand::Kind::kPlanUpdate;
    cmd.job_id = job.id;
    cmd.attempt = job.attempt;
    cmd.plan = plan;
    cmd.switch_iteration = at;
    w->connection->Send(std::move(cmd));
  }
  PlanSwitchEvent e;
  e.phase = PlanSwitchEvent::Phase::kScheduled;
  e.from_version = job.plan_version;
  e.to_version = plan->version;
  e.switch_iteration = at;
  e.measured_iteration = measured;
  e.old_bubble = pending.proposal.old_bubble;
  e.new_bubble = pending.proposal.new_bubble;
  LogInfo("job ", job.id, ": plan v", plan->version, " sent to every rank for iteration ", at, " (",
          pending.proposal.reason, ")");
  AppendPlanSwitchLocked(job, e, pending.proposal.reason);
  rt.pending = std::move(pending);
  PersistLocked(job);
}

void JobManager::AppendPlanSwitchLocked(JobRecord& job, PlanSwitchEvent e, std::string reason) {
  static constexpr absl::string_view kPhases[] = {"scheduled", "applied", "abandoned"};
  metrics_.ObservePlanSwitch(job.id, kPhases[static_cast<int>(e.phase)], job.plan_version);
  JobEvent event;
  event.sequence = ++job.last_sequence;
  event.time = clock_.Now();
  event.kind = JobEvent::Kind::kPlanSwitch;
  event.reason = std::move(reason);
  event.plan_switch = e;
  events_.Append(job.id, std::move(event));
}

std::optional<std::shared_ptr<const JobPlan>> JobManager::HolderPlan(const std::string& worker_name,
                                                                     const std::string& job_id,
                                                                     const RankStats& stats) const {
  absl::ReaderMutexLock lock(&mu_);
  const JobRecord* job = queue_.Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return std::nullopt;
  if (!workers_.HoldsRank(worker_name, job_id, stats.pipeline_rank, stats.data_rank)) {
    return std::nullopt;  // not from the worker holding that rank
  }
  auto rt = runtime_.find(job_id);
  if (rt == runtime_.end()) return nullptr;
  // A report of the first iteration with a pending plan comes before the switch is settled.
  const std::optional<PendingSwitch>& pending = rt->second.pending;
  if (pending && stats.plan_version == pending->proposal.plan->version) {
    return pending->proposal.plan;
  }
  return rt->second.plan;
}

absl::Status JobManager::CheckAssignedLocked(const std::string& worker_name,
                                             const std::string& job_id) const {
  if (const JobRecord* job = queue_.Find(job_id); job != nullptr) {
    for (const RankSlot& slot : job->ranks) {
      if (slot.worker_name == worker_name) return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("worker ", worker_name, " holds no rank of job '", job_id, "'"));
}

absl::Status JobManager::CheckAssigned(const std::string& worker_name,
                                       const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckAssignedLocked(worker_name, job_id);
}

absl::Status JobManager::CheckAssignedInstance(const std::string& instance_id,
                                               const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  if (std::optional<std::string> name = workers_.NameByInstance(instance_id)) {
    return CheckAssignedLocked(*name, job_id);
  }
  return absl::PermissionDeniedError(
      "rendezvous: instance_id does not name a registered worker (send the instance_id the "
      "worker registered with)");
}

absl::Status JobManager::RankFinished(const std::string& worker_id, const std::string& job_id,
                                      int pipeline_rank, int data_rank) {
  absl::MutexLock lock(&mu_);
  RegisteredWorker* w = workers_.ById(worker_id);
  if (w == nullptr) return absl::AbortedError("worker_id is no longer current");
  if (absl::Status st = WorkerRegistry::CheckRank(*w, job_id, pipeline_rank, data_rank); !st.ok()) {
    return st;
  }
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return absl::OkStatus();
  JobRuntime& rt = runtime_[job_id];
  rt.finished.insert(data_rank * job->spec.pipeline + pipeline_rank);
  LogInfo("job ", job_id, ": ", RankName(w->info.registration.name, pipeline_rank, data_rank),
          " finished (", rt.finished.size(), "/", job->spec.world_size(), ")");
  if (static_cast<int>(rt.finished.size()) == job->spec.world_size()) {
    FinishJobLocked(*job, JobState::kSucceeded,
                    absl::StrCat("all ", job->spec.world_size(), " ranks finished ",
                                 job->spec.iterations, " iterations"));
  }
  return absl::OkStatus();
}

absl::Status JobManager::RankFailed(const std::string& worker_id, const std::string& job_id,
                                    int pipeline_rank, int data_rank, const std::string& message,
                                    bool permanent) {
  absl::MutexLock lock(&mu_);
  RegisteredWorker* w = workers_.ById(worker_id);
  if (w == nullptr) return absl::AbortedError("worker_id is no longer current");
  if (absl::Status st = WorkerRegistry::CheckRank(*w, job_id, pipeline_rank, data_rank); !st.ok()) {
    return st;
  }
  JobRecord* job = queue_.Find(job_id);
  if (job == nullptr || IsTerminal(job->state)) return absl::OkStatus();
  const std::string failed =
      absl::StrCat(RankName(w->info.registration.name, pipeline_rank, data_rank),
                   " failed: ", message.substr(0, 4096));
  if (permanent) {  // its own cause, which another attempt would meet again
    FinishJobLocked(*job, JobState::kFailed,
                    absl::StrCat(failed, " (not restarted: a restart cannot fix this)"));
    return absl::OkStatus();
  }
  // When another rank of the job is gone, its loss is the cause and this failure the effect
  // (typically "connection reset by peer" on the survivor).
  if (std::optional<std::string> lost =
          Recovery::BlameLostRank(*job, w->info.registration.name, workers_)) {
    LoseRankLocked(*job, absl::StrCat(*lost, "; then ", failed));
    return absl::OkStatus();
  }
  if (!recovery_.DeferFailure(*job, failed, clock_.Now())) LoseRankLocked(*job, failed);
  return absl::OkStatus();
}

void JobManager::WorkerLeaving(const std::string& worker_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  RegisteredWorker* w = workers_.ById(worker_id);
  if (w == nullptr || w->info.state == WorkerState::kDead) return;
  MarkDeadLocked(*w, absl::StrCat("left: ", reason.empty() ? "shutting down" : reason));
}

void JobManager::CheckLiveness() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  metrics_.ExpireJobs(now);
  for (RegisteredWorker* w : workers_.SilentWorkers(now, options_.heartbeat_timeout)) {
    // Releasing an earlier one's job may have declared this one dead already.
    if (w->info.state == WorkerState::kDead) continue;
    MarkDeadLocked(
        *w, absl::StrCat("no heartbeat for ", absl::FormatDuration(now - w->info.last_seen)));
  }
  // Dead workers stay listed (ListWorkers include_dead) for a while, then are forgotten.
  workers_.ForgetDead(now);
  for (auto& [order, job] : queue_.all()) {
    if (job.state != JobState::kRunning) continue;
    if (std::optional<std::string> lost = recovery_.DueLoss(job, now)) {
      LoseRankLocked(job, *std::move(lost));
    }
  }
  // Restarting jobs whose backoff is over.
  for (const auto& [order, job] : queue_.all()) {
    if (job.state != JobState::kRestarting) continue;
    if (recovery_.RestartDue(job.id, now)) {
      TryScheduleLocked();
      break;
    }
  }
  // Changes the store refused (a full disk) are written again until it takes them.
  if (!unsaved_.empty()) RetryUnsavedLocked().IgnoreError();
}

void JobManager::MarkDeadLocked(RegisteredWorker& w, std::string reason) {
  const std::string job_id = workers_.MarkDead(w, reason);
  if (!job_id.empty()) {
    JobRecord* job = queue_.Find(job_id);
    if (job != nullptr && !IsTerminal(job->state)) {
      std::string why =
          absl::StrCat(RankName(w.info.registration.name, w.info.pipeline_rank, w.info.data_rank),
                       " lost: ", reason);
      if (const std::string* pending = recovery_.PendingFailure(job_id)) {
        absl::StrAppend(&why, "; then ", *pending);
      }
      LoseRankLocked(*job, std::move(why));
    }
  }
  UpdateGaugesLocked();
}

void JobManager::Shutdown() {
  {
    // Workers are not told to stop: their jobs run on, and they reconnect to the next
    // coordinator, which reloads the jobs from the store.
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    // A last try: what is still unsaved now is lost with this process.
    if (!unsaved_.empty()) {
      if (absl::Status st = RetryUnsavedLocked(); !st.ok()) {
        LogError("shutting down with unsaved job changes, which are lost: ", st.message());
      }
    }
  }
  events_.Close();
  logs_.Close();
}

// ---- rendezvous ----

namespace {
absl::Status ClosedStore(const std::string& job_id, const JobRecord* job) {
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  return absl::FailedPreconditionError(absl::StrCat(
      "job '", job_id, "' is ", JobStateName(job->state), "; its rendezvous store is closed"));
}
}  // namespace

absl::Status JobManager::RendezvousSet(const std::string& job_id, const std::string& key,
                                       std::string value) {
  absl::Status st = rendezvous_.Set(job_id, key, std::move(value));
  if (st.code() == absl::StatusCode::kNotFound && !rendezvous_.IsOpen(job_id)) {
    absl::ReaderMutexLock lock(&mu_);
    return ClosedStore(job_id, queue_.Find(job_id));
  }
  return st;
}

absl::StatusOr<std::string> JobManager::RendezvousGet(const std::string& job_id,
                                                      const std::string& key) const {
  absl::StatusOr<std::string> value = rendezvous_.Get(job_id, key);
  if (!value.ok() && value.status().code() == absl::StatusCode::kNotFound &&
      !rendezvous_.IsOpen(job_id)) {
    absl::ReaderMutexLock lock(&mu_);
    return ClosedStore(job_id, queue_.Find(job_id));
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> JobManager::RendezvousWait(
    const std::string& job_id, const std::vector<std::string>& keys, absl::Time deadline,
    const std::function<bool()>& cancelled) const {
  if (!rendezvous_.IsOpen(job_id)) {
    absl::ReaderMutexLock lock(&mu_);
    return ClosedStore(job_id, queue_.Find(job_id));
  }
  return rendezvous_.Wait(job_id, keys, deadline, cancelled);
}

}  // namespace zpipe::coordinator
