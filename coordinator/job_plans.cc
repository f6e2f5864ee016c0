#include "coordinator/job_plans.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace zpipe::coordinator {

std::shared_ptr<const JobPlan> JobPlans::For(const JobRecord& job) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = jobs_.find(job.id);
    if (it != jobs_.end() && (it->second.plan || it->second.failed)) return it->second.plan;
  }
  // Without the lock: the search takes up to its budget. Callers racing here make the same plan
  // (it is deterministic in what it is made from); the first one stored is kept.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = Make(job);
  absl::MutexLock lock(&mu_);
  Entry& entry = jobs_[job.id];
  if (entry.plan || entry.failed) return entry.plan;
  if (!plan.ok()) {
    entry.failed = true;
    LogError("job ", job.id, ": cannot make its plan: ", plan.status().ToString());
    return nullptr;
  }
  entry.plan = *plan;
  return entry.plan;
}

absl::StatusOr<std::shared_ptr<const JobPlan>> JobPlans::Make(const JobRecord& job) {
  // The plan the ranks run: from the profiled layout of a model whose blocks were timed, and
  // after a re-plan from the costs and version the ranks switched to.
  const ModelLayout* layout = job.layout ? &*job.layout : nullptr;
  return PlanJob(job.spec, layout, job.plan_costs, job.plan_version);
}

std::shared_ptr<const JobPlan> JobPlans::Find(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.plan;
}

bool JobPlans::Known(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && (it->second.plan || it->second.failed);
}

void JobPlans::Set(const std::string& job_id, std::shared_ptr<const JobPlan> plan) {
  absl::MutexLock lock(&mu_);
  jobs_[job_id].plan = std::move(plan);
}

void JobPlans::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

void JobPlans::StartOver(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Entry& entry = jobs_[job_id];
  entry.pending.reset();
  entry.window = ReplanWindow{};
}

std::shared_ptr<const JobPlan> JobPlans::ForReport(const std::string& job_id,
                                                   int plan_version) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return nullptr;
  const std::optional<PendingSwitch>& pending = it->second.pending;
  if (pending && plan_version == pending->proposal.plan->version) return pending->proposal.plan;
  return it->second.plan;
}

std::optional<ReplanCheck> JobPlans::Observe(JobRecord& job, const IterationSummary& summary) {
  absl::MutexLock lock(&mu_);
  Entry& entry = jobs_[job.id];
  if (entry.plan == nullptr) return std::nullopt;
  if (entry.pending && summary.iteration >= entry.pending->switch_iteration) {
    PendingSwitch pending = *std::move(entry.pending);
    entry.pending.reset();
    SettleLocked(job, entry, std::move(pending), summary);
    entry.window = ReplanWindow{};
  }
  if (job.spec.replan_every <= 0 || entry.pending) return std::nullopt;
  AddToWindow(entry.window, summary, job.plan_version);
  if (entry.window.iterations < job.spec.replan_every) return std::nullopt;
  ReplanCheck check;
  check.spec = job.spec;
  check.plan = entry.plan;
  check.layout = job.layout;
  check.window = std::move(entry.window);
  check.attempt = job.attempt;
  check.iteration_seconds = summary.duration_s;
  entry.window = ReplanWindow{};
  return check;
}

void JobPlans::SettleLocked(JobRecord& job, Entry& entry, PendingSwitch pending,
                            const IterationSummary& summary) {
  // Every rank ran the switch iteration with one plan (PlanUpdate in worker.proto): the new one
  // when all of them had it in time, else the old one.
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
    entry.plan = pending.proposal.plan;
    monitor_.SwitchPlan(job.id, *entry.plan);
    LogInfo("job ", job.id, ": plan v", to, " runs on every rank from iteration ",
            pending.switch_iteration);
    AppendSwitchEvent(job, e,
                      absl::StrCat("every rank runs plan v", to, " from iteration ",
                                   pending.switch_iteration + 1, "; ", pending.proposal.reason));
    return;
  }
  e.phase = PlanSwitchEvent::Phase::kAbandoned;
  const std::string why =
      switched == 0
          ? absl::StrCat("a rank had started iteration ", pending.switch_iteration + 1,
                         " before plan v", to, " reached it; every rank kept plan v",
                         job.plan_version)
          : absl::StrCat(switched, " of ", summary.ranks.size(), " ranks ran plan v", to,
                         " at iteration ", summary.iteration + 1, " (a bug: switches are atomic)");
  if (switched != 0) LogError("job ", job.id, ": ", why);
  AppendSwitchEvent(job, e, why);
}

bool JobPlans::MaybeSwitch(JobRecord& job, const ReplanCheck& check, ReplanProposal proposal,
                           absl::FunctionRef<WorkerConnection*(const std::string&)> connection_of) {
  absl::MutexLock lock(&mu_);
  Entry& entry = jobs_[job.id];
  if (entry.plan != check.plan || entry.pending || job.attempt != check.attempt) return false;
  if (!WorthSwitching(job, entry, proposal)) return false;
  const int measured = check.window.last_iteration;
  // The ranks went on while the proposal was made (its search runs up to the spec's search
  // budget): the switch is timed from the latest iteration they have reported by now.
  const int reported =
      job.latest_summary ? std::max(measured, job.latest_summary->iteration) : measured;
  const int at = SwitchIteration(reported, check.iteration_seconds);
  if (at >= job.spec.iterations) {
    LogInfo("job ", job.id, ": a better plan (", proposal.reason, ") comes too late to switch");
    return false;
  }
  // Every rank must get the plan: one that never answers makes the others fail at the switch.
  for (const RankSlot& slot : job.ranks) {
    if (connection_of(slot.worker_name) == nullptr) {
      LogInfo("job ", job.id, ": re-plan deferred, worker ", slot.worker_name, " is not connected");
      return false;
    }
  }
  PendingSwitch pending;
  pending.switch_iteration = at;
  pending.measured_iteration = measured;
  pending.proposal = std::move(proposal);
  SendSwitch(job, pending, connection_of);
  const JobPlan& plan = *pending.proposal.plan;
  PlanSwitchEvent e;
  e.phase = PlanSwitchEvent::Phase::kScheduled;
  e.from_version = job.plan_version;
  e.to_version = plan.version;
  e.switch_iteration = at;
  e.measured_iteration = measured;
  e.old_bubble = pending.proposal.old_bubble;
  e.new_bubble = pending.proposal.new_bubble;
  LogInfo("job ", job.id, ": plan v", plan.version, " sent to every rank for iteration ", at, " (",
          pending.proposal.reason, ")");
  AppendSwitchEvent(job, e, pending.proposal.reason);
  entry.pending = std::move(pending);
  return true;
}

bool JobPlans::WorthSwitching(const JobRecord& job, const Entry& entry,
                              const ReplanProposal& proposal) const {
  // A floor under a zero threshold: float noise is no reason to move every rank.
  constexpr double kMinGain = 1e-6;
  const double threshold = job.spec.replan_threshold_or_default();
  if (proposal.old_bubble - proposal.new_bubble > std::max(threshold, kMinGain) &&
      proposal.plan->text != entry.plan->text) {
    return true;
  }
  LogInfo("job ", job.id, ": re-plan check kept plan v", job.plan_version, " (", proposal.reason,
          "; threshold ", threshold, ")");
  return false;
}

void JobPlans::SendSwitch(
    const JobRecord& job, const PendingSwitch& pending,
    absl::FunctionRef<WorkerConnection*(const std::string&)> connection_of) const {
  for (const RankSlot& slot : job.ranks) {
    WorkerCommand cmd;
    cmd.kind = WorkerCommand::Kind::kPlanUpdate;
    cmd.job_id = job.id;
    cmd.attempt = job.attempt;
    cmd.plan = pending.proposal.plan;
    cmd.switch_iteration = pending.switch_iteration;
    connection_of(slot.worker_name)->Send(std::move(cmd));
  }
}

void JobPlans::AppendSwitchEvent(JobRecord& job, PlanSwitchEvent e, std::string reason) {
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

}  // namespace zpipe::coordinator
