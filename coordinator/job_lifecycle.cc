#include "coordinator/job_lifecycle.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "util/log.h"
#include "coordinator/spec_defaults.h"
#include "coordinator/worker_match.h"

namespace zpipe::coordinator {
namespace {

// TorchScript and Python jobs without cuts are profiled before their plan is made.
bool NeedsProfile(const JobRecord& job) {
  const std::vector<int>* cuts = BlockModelCuts(job.spec);
  return cuts != nullptr && cuts->empty();
}

}  // namespace

JobLifecycle::JobLifecycle(Clock& clock, Metrics& metrics, const ManagerOptions& options,
                           JobStoreWriter& writer, JobPlans& plans, RunMonitor& monitor,
                           Rendezvous& rendezvous, JobEventLog& events)
    : clock_(clock),
      metrics_(metrics),
      writer_(writer),
      plans_(plans),
      monitor_(monitor),
      rendezvous_(rendezvous),
      events_(events),
      recovery_grace_(options.recovery_grace),
      retain_finished_(options.retain_finished),
      retain_count_(options.retain_count),
      workers_(options.workers),
      recovery_(options.failure_grace, options.recovery_grace) {}

void JobLifecycle::Restore(std::vector<JobRecord> loaded,
                           std::vector<std::vector<JobEvent>> events) {
  for (JobRecord& rec : loaded) {
    // A job stored without a search budget that ran was planned with the greedy pass: its ranks
    // run (or ran) that plan. One that never ran gets the default, like a new submit.
    if (!rec.spec.search_budget && rec.attempt > 0) rec.spec.search_budget = 0;
    // Likewise one stored without polish was planned before plans were polished.
    if (!rec.spec.polish && rec.attempt > 0) rec.spec.polish = false;
    // Jobs stored by a coordinator before defaults were resolved at submit hold the raw spec.
    rec.spec = ResolveSpecDefaults(std::move(rec.spec));
    // Every job that may run again gets its plan now, before the lock: a search takes up to its
    // budget, and under the lock (Start, a worker's report) the plan is then only looked up.
    if (!IsTerminal(rec.state)) plans_.For(rec);
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  int running = 0;
  for (size_t i = 0; i < loaded.size(); ++i) {
    JobRecord& rec = loaded[i];
    const std::string id = rec.id;
    events_.Open(id, rec.last_sequence,
                 i < events.size() ? std::move(events[i]) : std::vector<JobEvent>());
    if (!IsTerminal(rec.state)) rendezvous_.Open(id);
    JobRecord& job = queue_.Add(std::move(rec));
    if (std::optional<std::string> requeue = recovery_.Reconcile(job, now)) {
      SetState(job, JobState::kPending, *std::move(requeue));
    } else if (job.state == JobState::kRunning) {
      ++running;
      if (std::shared_ptr<const JobPlan> plan = PlanFor(job)) {
        // Progress resumes at the stored count; the workers' buffered reports fill in the rest.
        monitor_.StartJob(id, job.spec, *plan, job.ranks, job.iterations_done);
      }
    }
  }
  LogInfo("loaded ", queue_.all().size(), " jobs from the store; ", running,
          " RUNNING jobs wait up to ", absl::FormatDuration(recovery_grace_),
          " for their workers to reconnect");
  UpdateGauges();
}

JobRecord& JobLifecycle::Admit(JobRecord record, std::shared_ptr<const JobPlan> plan) {
  JobRecord& job = queue_.Add(std::move(record));
  plans_.Set(job.id, std::move(plan));
  events_.Open(job.id, 0);
  rendezvous_.Open(job.id);
  const JobSpec& spec = job.spec;
  LogInfo("job ", job.id, ": submitted '", spec.name, "' (", spec.schedule, ", p=", spec.pipeline,
          " d=", spec.data_parallel(), " m=", spec.microbatches, ", ", spec.iterations,
          " iterations, ", DeviceKindName(spec.device), ") -> PENDING");
  TrySchedule();
  UpdateGauges();
  return job;
}

void JobLifecycle::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  // A last try: what is still unsaved now is lost with this process.
  if (writer_.HasUnsaved()) {
    if (absl::Status st = RetryUnsaved(); !st.ok()) {
      LogError("shutting down with unsaved job changes, which are lost: ", st.message());
    }
  }
}

void JobLifecycle::SetState(JobRecord& job, JobState to, std::string reason) {
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
  Persist(job);
  LogInfo("job ", job.id, ": ", JobStateName(from), " -> ", JobStateName(to), " (", job.reason,
          ")");
  UpdateGauges();
}

void JobLifecycle::Finish(JobRecord& job, JobState to, std::string reason) {
  Recovery::CloseAttempt(job, reason, clock_.Now());
  SetState(job, to, std::move(reason));
  metrics_.JobFinished(job.id, to, clock_.Now());
  Release(job, /*cancel=*/to != JobState::kSucceeded);
  rendezvous_.Close(job.id);
  if (auto run = runs_.find(job.id); run != runs_.end()) run->second.finished.clear();
  recovery_.Finished(job.id);
  TrySchedule();
  UpdateGauges();
}

absl::Status JobLifecycle::Delete(JobRecord& job) {
  const std::string id = job.id;
  if (absl::Status st = writer_.Delete(id); !st.ok()) return st;
  rendezvous_.Close(id);
  runs_.erase(id);
  recovery_.Forget(id);
  plans_.Forget(id);
  monitor_.Forget(id);
  events_.Forget(id);
  queue_.Remove(id);  // `job` dangles from here
  LogInfo("job ", id, ": deleted");
  UpdateGauges();
  return absl::OkStatus();
}

std::vector<std::string> JobLifecycle::DeleteExpired(absl::Time now) {
  std::vector<std::string> deleted;
  if (retain_count_ <= 0 && retain_finished_ <= absl::ZeroDuration()) return deleted;
  std::vector<JobRecord*> finished;
  for (auto& [order, job] : queue_.all()) {
    if (IsTerminal(job.state)) finished.push_back(&job);
  }
  // Newest first: the first retain_count are kept (by count).
  std::stable_sort(finished.begin(), finished.end(), [](const JobRecord* a, const JobRecord* b) {
    return a->end_time > b->end_time;
  });
  std::vector<JobRecord*> expired;
  for (size_t i = 0; i < finished.size(); ++i) {
    const bool too_many = retain_count_ > 0 && i >= static_cast<size_t>(retain_count_);
    const bool too_old =
        retain_finished_ > absl::ZeroDuration() && now - finished[i]->end_time > retain_finished_;
    if (too_many || too_old) expired.push_back(finished[i]);
  }
  // Oldest first, so a store refusal halfway keeps the newest.
  for (auto it = expired.rbegin(); it != expired.rend(); ++it) {
    const std::string id = (*it)->id;
    if (absl::Status st = Delete(**it); !st.ok()) {
      LogError("job ", id, ": past its retention but not deleted (", st.message(),
               "); tried again at the next check");
      break;
    }
    deleted.push_back(id);
  }
  if (!deleted.empty()) {
    LogInfo("deleted ", deleted.size(), " finished jobs past the retention (--retain-finished ",
            absl::FormatDuration(retain_finished_), ", --retain-count ", retain_count_, ")");
  }
  return deleted;
}

void JobLifecycle::LoseRank(JobRecord& job, std::string reason) {
  Recovery::Decision decision = recovery_.OnRankLost(job, std::move(reason), clock_.Now());
  if (!decision.restart) {
    Finish(job, JobState::kFailed, std::move(decision.reason));
    return;
  }
  Release(job, /*cancel=*/true);
  runs_[job.id].finished.clear();
  // A switch sent to the previous attempt's ranks never happens; this attempt runs `plan`.
  plans_.StartOver(job.id);
  metrics_.JobRestarted(job.id);
  SetState(job, JobState::kRestarting, std::move(decision.reason));
  // Its workers are not idle until their heartbeats say the attempt is torn down; the liveness
  // loop schedules the job once the backoff is over.
  TrySchedule();
  UpdateGauges();
}

void JobLifecycle::CheckRecoveryDeadlines(absl::Time now) {
  for (auto& [order, job] : queue_.all()) {
    if (job.state != JobState::kRunning) continue;
    if (std::optional<std::string> lost = recovery_.DueLoss(job, now)) {
      LoseRank(job, *std::move(lost));
    }
  }
  // Restarting jobs whose backoff is over.
  for (const auto& [order, job] : queue_.all()) {
    if (job.state != JobState::kRestarting) continue;
    if (recovery_.RestartDue(job.id, now)) {
      TrySchedule();
      break;
    }
  }
}

void JobLifecycle::Release(JobRecord& job, bool cancel) {
  std::vector<std::string> names;
  for (const RankSlot& slot : job.ranks) names.push_back(slot.worker_name);
  workers_.Release(job.id, names, cancel, job.reason);
}

void JobLifecycle::TrySchedule() {
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
    Start(job, std::move(idle));
    return true;
  });
}

bool JobLifecycle::Start(JobRecord& job, std::vector<RegisteredWorker*> workers) {
  if (NeedsProfile(job)) {
    Reserve(job, workers);
    StartProfile(job, *workers[0]);
    return true;
  }
  std::shared_ptr<const JobPlan> plan = PlanFor(job);
  if (!plan) {
    // Cannot happen for a job whose spec was accepted by this build; fail it rather than loop.
    SetState(job, JobState::kFailed, "the plan could not be generated (see coordinator log)");
    rendezvous_.Close(job.id);
    return false;
  }
  Reserve(job, workers);
  Dispatch(job, workers, std::move(plan));
  return true;
}

void JobLifecycle::StartProfile(JobRecord& job, RegisteredWorker& worker) {
  Run& run = runs_[job.id];
  run.profiling_worker = worker.info.registration.name;
  SetState(job, JobState::kScheduling,
           absl::StrCat("attempt ", job.attempt, ": timing the model's blocks on ",
                        run.profiling_worker, " to balance the stages"));
  auto request = std::make_shared<AssignmentData>();
  request->job_id = job.id;
  request->spec = job.spec;
  request->attempt = job.attempt;
  WorkerCommand cmd;
  cmd.kind = WorkerCommand::Kind::kProfile;
  cmd.assignment = std::move(request);
  worker.connection->Send(std::move(cmd));
}

void JobLifecycle::Reserve(JobRecord& job, const std::vector<RegisteredWorker*>& workers) {
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
  SetState(job, JobState::kScheduling,
           absl::StrCat("attempt ", job.attempt, " on workers ", names));
}

void JobLifecycle::Dispatch(JobRecord& job, const std::vector<RegisteredWorker*>& workers,
                            std::shared_ptr<const JobPlan> plan) {
  const int p = job.spec.pipeline, d = job.spec.data_parallel();
  // The workers run with the cuts chosen for the job (its spec, as submitted, may have none).
  JobSpec run_spec = job.spec;
  if (std::vector<int>* cuts = MutableBlockModelCuts(run_spec); cuts != nullptr) {
    if (!job.layout) job.layout = ModelLayout{"spec", *cuts, {}, 0};
    *cuts = job.layout->cuts;
  }
  monitor_.StartJob(job.id, job.spec, *plan, job.ranks);
  runs_[job.id].finished.clear();
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
  SetState(job, JobState::kRunning, absl::StrCat("assignments sent to ", p * d, " workers"));
}

std::shared_ptr<const JobPlan> JobLifecycle::PlanFor(const JobRecord& job) const {
  return plans_.For(job);
}

JobView JobLifecycle::View(const JobRecord& job, bool with_progress, bool with_microbatches) const {
  JobView view;
  view.record = job;
  view.plan = plans_.Find(job.id);
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
      view.progress->iterations_done =
          std::max(view.progress->iterations_done, job.iterations_done);
    }
  }
  if (job.state == JobState::kPending) view.queue_position = queue_.QueuePosition(job);
  return view;
}

absl::Status JobLifecycle::Store(const JobRecord& job) { return writer_.Put(job); }

absl::Status JobLifecycle::RetryUnsaved() {
  // Called back inside RetryUnsaved, still under mu_.
  return writer_.RetryUnsaved([this](const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<const JobRecord*>(queue_.Find(id));
  });
}

void JobLifecycle::UpdateGauges() {
  const std::array<int64_t, std::size(kAllJobStates)> jobs = queue_.CountByState();
  for (JobState s : kAllJobStates) metrics_.SetJobCount(s, jobs[static_cast<int>(s)]);
  const std::array<int64_t, 3> workers = workers_.CountByState();
  for (WorkerState s : kAllWorkerStates) metrics_.SetWorkerCount(s, workers[static_cast<int>(s)]);
}

}  // namespace zpipe::coordinator
