// Recovery: lost ranks, restarts and reconciliation after a coordinator restart.
#include "coordinator/recovery.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace zpipe::coordinator {

Recovery::Recovery(absl::Duration failure_grace, absl::Duration recovery_grace)
    : failure_grace_(failure_grace), recovery_grace_(recovery_grace) {}

void Recovery::CloseAttempt(JobRecord& job, const std::string& reason, absl::Time now) {
  if (job.attempts.empty()) return;
  JobAttemptRecord& a = job.attempts.back();
  if (a.end_time != absl::InfinitePast()) return;
  a.end_time = now;
  a.end_reason = reason;
  a.iterations_done = job.iterations_done;
}

std::optional<std::string> Recovery::Reconcile(JobRecord& job, absl::Time now) {
  if (job.state == JobState::kScheduling) {
    CloseAttempt(job, "coordinator restarted while scheduling", now);
    job.ranks.clear();
    return "coordinator restarted while scheduling; queued again";
  }
  if (job.state == JobState::kRestarting) {
    JobRecovery& r = jobs_[job.id];
    r.restart_at = now;
    r.restart_reason = job.reason;
  } else if (job.state == JobState::kRunning) {
    jobs_[job.id].reconnect_deadline = now + recovery_grace_;
  }
  return std::nullopt;
}

void Recovery::Reconnected(const std::string& job_id, int global_rank) {
  jobs_[job_id].reconnected.insert(global_rank);
}

Recovery::Decision Recovery::OnRankLost(JobRecord& job, std::string reason, absl::Time now) {
  const int max = job.spec.max_restarts;
  if (job.state != JobState::kRunning || job.restarts >= max) {
    if (max > 0 && job.state == JobState::kRunning) {
      absl::StrAppend(&reason, " (no restarts left: ", job.restarts, " of ", max, " used)");
    }
    return Decision{false, std::move(reason)};
  }
  const absl::Duration backoff = RestartBackoff(job.spec).value_or(absl::Seconds(2));
  CloseAttempt(job, reason, now);
  ++job.restarts;
  JobRecovery& r = jobs_[job.id];
  r.pending_failure.reset();
  r.reconnected.clear();
  r.reconnect_deadline.reset();
  r.restart_at = now + backoff;
  r.restart_reason =
      absl::StrCat("attempt ", job.attempt, ": ", reason, "; restart ", job.restarts, " of ", max,
                   " in ", absl::FormatDuration(backoff),
                   job.spec.checkpoint_every > 0 ? ", from the latest complete checkpoint"
                                                 : ", from iteration 0 (no checkpoints)");
  return Decision{true, r.restart_reason};
}

std::optional<std::string> Recovery::BlameLostRank(const JobRecord& job,
                                                   const std::string& except_worker,
                                                   const WorkerRegistry& workers) {
  for (const RankSlot& slot : job.ranks) {
    if (slot.worker_name == except_worker) continue;
    if (std::optional<std::string> lost = workers.WhyNotRunning(slot, job.id)) return lost;
  }
  return std::nullopt;
}

bool Recovery::DeferFailure(const JobRecord& job, const std::string& failed, absl::Time now,
                            bool peer_lost) {
  if (job.state != JobState::kRunning) return false;
  JobRecovery& r = jobs_[job.id];
  if (r.pending_failure) return true;
  if (r.reconnect_deadline && now < *r.reconnect_deadline) {
    r.pending_failure = JobRecovery::PendingFailure{failed, *r.reconnect_deadline, peer_lost};
    LogInfo("job ", job.id, ": ", failed, "; waiting up to ",
            absl::FormatDuration(*r.reconnect_deadline - now),
            " for the workers that have not reconnected since the restart");
    return true;
  }
  if (failure_grace_ <= absl::ZeroDuration()) return false;
  r.pending_failure = JobRecovery::PendingFailure{failed, now + failure_grace_, peer_lost};
  LogInfo("job ", job.id, ": ", failed, "; waiting up to ", absl::FormatDuration(failure_grace_),
          " for a lost peer to blame");
  return true;
}

std::optional<std::string> Recovery::TakeEffectFailure(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.pending_failure || !it->second.pending_failure->peer_lost) {
    return std::nullopt;
  }
  std::string reason = std::move(it->second.pending_failure->reason);
  it->second.pending_failure.reset();
  return reason;
}

bool Recovery::AwaitingReconnect(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.reconnect_deadline.has_value();
}

const std::string* Recovery::PendingFailure(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.pending_failure) return nullptr;
  return &it->second.pending_failure->reason;
}

std::optional<std::string> Recovery::DueLoss(const JobRecord& job, absl::Time now) {
  JobRecovery& r = jobs_[job.id];
  if (r.reconnect_deadline) {
    std::optional<RankSlot> missing;
    for (const RankSlot& slot : job.ranks) {
      if (!r.reconnected.contains(slot.data_rank * job.spec.pipeline + slot.pipeline_rank)) {
        missing = slot;
        break;
      }
    }
    if (!missing) {
      r.reconnect_deadline.reset();  // every worker is back: a pending failure is its own
      if (r.pending_failure) return r.pending_failure->reason;
    } else if (now >= *r.reconnect_deadline) {
      r.reconnect_deadline.reset();
      std::string reason = absl::StrCat(
          "coordinator restarted and ",
          RankName(missing->worker_name, missing->pipeline_rank, missing->data_rank),
          " did not reconnect within ", absl::FormatDuration(recovery_grace_));
      // A survivor's failure (its receive from the missing rank broke) is the effect.
      if (r.pending_failure) absl::StrAppend(&reason, "; then ", r.pending_failure->reason);
      return reason;
    } else {
      return std::nullopt;
    }
  }
  if (r.pending_failure && now >= r.pending_failure->deadline) {
    // No peer was lost: the reporting rank's own failure is the cause.
    return r.pending_failure->reason;
  }
  return std::nullopt;
}

bool Recovery::HeldBack(const std::string& job_id, absl::Time now) const {
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.restart_at && now < *it->second.restart_at;
}

bool Recovery::RestartDue(const std::string& job_id, absl::Time now) const {
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.restart_at && now >= *it->second.restart_at;
}

std::string Recovery::RestartReason(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? "" : it->second.restart_reason;
}

void Recovery::Scheduled(const std::string& job_id) {
  if (auto it = jobs_.find(job_id); it != jobs_.end()) it->second.restart_at.reset();
}

void Recovery::Dispatched(const std::string& job_id) {
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    it->second.reconnected.clear();
    it->second.reconnect_deadline.reset();
  }
}

void Recovery::Finished(const std::string& job_id) {
  if (auto it = jobs_.find(job_id); it != jobs_.end()) {
    it->second.pending_failure.reset();
    it->second.reconnected.clear();
    it->second.reconnect_deadline.reset();
    it->second.restart_at.reset();
  }
}

}  // namespace zpipe::coordinator
