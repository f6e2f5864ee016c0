#include "coordinator/rank_reports.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"
#include "coordinator/replanner.h"

namespace zpipe::coordinator {

absl::Status RankReports::Iteration(const std::string& worker_id, const std::string& job_id,
                                    int iteration, const RankStats& stats,
                                    std::optional<double> loss, std::optional<double> eval_loss) {
  absl::StatusOr<std::string> name = WorkerName(worker_id);
  if (!name.ok()) return name.status();
  // Earlier half-reported iterations (their other reports died with a previous coordinator)
  // come first; the last is this iteration's when the report completed it.
  bool repeated = false;
  std::vector<IterationSummary> summaries =
      monitor_.AddReport(job_id, *name, iteration, stats, loss, eval_loss, clock_.Now(), &repeated);
  // A report sent again after a reconnect (one taken already) is not measured twice.
  if (repeated) return absl::OkStatus();
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
  if (std::optional<ReplanCheck> check = Record(job_id, iteration, std::move(summaries))) {
    Replan(job_id, *check);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RankReports::WorkerName(const std::string& worker_id) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  return lifecycle.workers().NameOf(worker_id);
}

std::optional<std::shared_ptr<const JobPlan>> RankReports::HolderPlan(
    const std::string& worker_name, const std::string& job_id, const RankStats& stats) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  const JobRecord* job = lifecycle.queue().Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return std::nullopt;
  if (!lifecycle.workers().HoldsRank(worker_name, job_id, stats.pipeline_rank, stats.data_rank)) {
    return std::nullopt;  // not from the worker holding that rank
  }
  return plans_.ForReport(job_id, stats.plan_version);
}

std::optional<ReplanCheck> RankReports::Record(const std::string& job_id, int iteration,
                                               std::vector<IterationSummary> summaries) {
  std::optional<ReplanCheck> check;
  for (IterationSummary& completed : summaries) {
    absl::MutexLock lock(&lifecycle_.mu());
    JobRecord* job = lifecycle_.queue().Find(job_id);
    if (job == nullptr || IsTerminal(job->state)) return std::nullopt;
    events_.Append(job_id, RunMonitor::RecordSummary(*job, std::move(completed), clock_.Now()));
    const IterationSummary& s = *job->latest_summary;
    LogInfo("job ", job_id, ": iteration ", s.iteration, " done in ", s.duration_s, " s (bubble ",
            s.bubble_rate, ", predicted ", s.predicted_bubble_rate,
            s.loss ? absl::StrCat(", loss ", *s.loss) : "",
            s.eval_loss ? absl::StrCat(", eval loss ", *s.eval_loss) : "", ")");
    logs_.AppendJobLine(job_id, clock_.Now(), RunMonitor::IterationLogLine(s));
    // A half-reported iteration lacks ranks' costs: only complete ones feed the re-planner.
    if (job->state == JobState::kRunning && s.iteration == iteration) {
      check = plans_.Observe(*job, s);
    }
    lifecycle_.Persist(*job);
  }
  return check;
}

void RankReports::Replan(const std::string& job_id, const ReplanCheck& check) {
  // Outside the lock: generating and simulating two plans.
  absl::StatusOr<ReplanProposal> proposal =
      ProposeReplan(check.spec, *check.plan, check.window, check.layout ? &*check.layout : nullptr);
  if (!proposal.ok()) {
    LogWarning("job ", job_id,
               ": re-plan from measured costs failed: ", proposal.status().message());
    return;
  }
  absl::MutexLock lock(&lifecycle_.mu());
  JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return;
  // Called back by MaybeSwitch, still under the lock.
  auto connection_of = [this](const std::string& name)
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu()) -> WorkerConnection* {
    const RegisteredWorker* w = lifecycle_.workers().ByName(name);
    return w == nullptr ? nullptr : w->connection;
  };
  if (plans_.MaybeSwitch(*job, check, *std::move(proposal), connection_of)) {
    lifecycle_.Persist(*job);
  }
}

absl::StatusOr<RegisteredWorker*> RankReports::Holder(const std::string& worker_id,
                                                      const std::string& job_id, int pipeline_rank,
                                                      int data_rank) {
  RegisteredWorker* w = lifecycle_.workers().ById(worker_id);
  if (w == nullptr) return absl::AbortedError("worker_id is no longer current");
  if (absl::Status st = WorkerRegistry::CheckRank(*w, job_id, pipeline_rank, data_rank); !st.ok()) {
    return st;
  }
  return w;
}

absl::Status RankReports::Finished(const std::string& worker_id, const std::string& job_id,
                                   int pipeline_rank, int data_rank) {
  absl::MutexLock lock(&lifecycle_.mu());
  absl::StatusOr<RegisteredWorker*> w = Holder(worker_id, job_id, pipeline_rank, data_rank);
  if (!w.ok()) return w.status();
  JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr || job->state != JobState::kRunning) return absl::OkStatus();
  std::set<int>& finished = lifecycle_.run(job_id).finished;
  finished.insert(data_rank * job->spec.pipeline + pipeline_rank);
  LogInfo("job ", job_id, ": ", RankName((*w)->info.registration.name, pipeline_rank, data_rank),
          " finished (", finished.size(), "/", job->spec.world_size(), ")");
  if (static_cast<int>(finished.size()) == job->spec.world_size()) {
    lifecycle_.Finish(*job, JobState::kSucceeded,
                      absl::StrCat("all ", job->spec.world_size(), " ranks finished ",
                                   job->spec.iterations, " iterations"));
  }
  return absl::OkStatus();
}

absl::Status RankReports::Failed(const std::string& worker_id, const std::string& job_id,
                                 int pipeline_rank, int data_rank, const std::string& message,
                                 bool permanent, bool peer_lost) {
  absl::MutexLock lock(&lifecycle_.mu());
  absl::StatusOr<RegisteredWorker*> w = Holder(worker_id, job_id, pipeline_rank, data_rank);
  if (!w.ok()) return w.status();
  JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr || IsTerminal(job->state)) return absl::OkStatus();
  const std::string& worker_name = (*w)->info.registration.name;
  const std::string failed = absl::StrCat(RankName(worker_name, pipeline_rank, data_rank),
                                          " failed: ", message.substr(0, 4096));
  if (permanent) {  // its own cause, which another attempt would meet again
    lifecycle_.Finish(*job, JobState::kFailed,
                      absl::StrCat(failed, " (not restarted: a restart cannot fix this)"));
    return absl::OkStatus();
  }
  // A failure of this rank's own while another's broken connection waits for a cause: this is
  // it (a rank raising an exception closes its connections, and its peer may report first).
  if (!peer_lost) {
    if (std::optional<std::string> effect = lifecycle_.recovery().TakeEffectFailure(job->id)) {
      lifecycle_.LoseRank(*job, absl::StrCat(failed, "; then ", *effect));
      return absl::OkStatus();
    }
  }
  // After a restart, a rank whose worker has not come back yet may be the cause: wait for it.
  if (lifecycle_.recovery().AwaitingReconnect(job->id)) {
    if (lifecycle_.recovery().DeferFailure(*job, failed, clock_.Now(), peer_lost)) {
      return absl::OkStatus();
    }
  }
  // When another rank of the job is gone, its loss is the cause and this failure the effect
  // (typically "connection reset by peer" on the survivor).
  if (std::optional<std::string> lost =
          Recovery::BlameLostRank(*job, worker_name, lifecycle_.workers())) {
    lifecycle_.LoseRank(*job, absl::StrCat(*lost, "; then ", failed));
    return absl::OkStatus();
  }
  if (!lifecycle_.recovery().DeferFailure(*job, failed, clock_.Now(), peer_lost)) {
    lifecycle_.LoseRank(*job, failed);
  }
  return absl::OkStatus();
}

}  // namespace zpipe::coordinator
