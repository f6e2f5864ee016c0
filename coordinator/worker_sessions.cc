#include "coordinator/worker_sessions.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace zpipe::coordinator {
namespace {

void LogRegistered(const WorkerRegistration& reg, const std::string& worker_id) {
  LogInfo("worker ", reg.name, ": registered (", DeviceKindName(reg.device_kind), ":",
          reg.device_index, " on ", reg.host.empty() ? "?" : reg.host,
          reg.capabilities ? absl::StrCat(", LibTorch ", reg.capabilities->libtorch_version,
                                          reg.capabilities->torch_cuda ? " CUDA" : " CPU-only")
                           : ", no capabilities reported",
          ") as ", worker_id);
}

// OK when `worker_name` holds a rank of (or is reserved for) job `job_id`.
absl::Status HoldsRankOf(const JobQueue& queue, const std::string& worker_name,
                         const std::string& job_id) {
  if (const JobRecord* job = queue.Find(job_id); job != nullptr) {
    for (const RankSlot& slot : job->ranks) {
      if (slot.worker_name == worker_name) return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("worker ", worker_name, " holds no rank of job '", job_id, "'"));
}

}  // namespace

absl::StatusOr<RegisterResult> WorkerSessions::Register(const WorkerRegistration& reg) {
  if (absl::Status st = WorkerRegistry::Validate(reg); !st.ok()) return st;
  absl::MutexLock lock(&lifecycle_.mu());
  if (lifecycle_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
  const absl::Time now = clock_.Now();
  if (absl::Status st = lifecycle_.workers().CheckNameFree(reg); !st.ok()) return st;
  if (absl::Status st = lifecycle_.workers().CheckCapacity(reg); !st.ok()) {
    LogWarning("refused worker registration: ", st.message());
    return st;
  }
  // The rank this name holds in an active job, whether from the live registry or (after a
  // coordinator restart) only from the job records.
  auto [held_job, held_slot] = lifecycle_.queue().ActiveRankOf(reg.name);
  RegisteredWorker& entry = lifecycle_.workers().Add(reg, now);
  RegisterResult result;
  result.worker_id = entry.info.worker_id;
  const std::string failure = ClaimHeldRank(reg, entry, held_job, held_slot, &result);
  LogRegistered(reg, result.worker_id);
  if (!failure.empty()) {
    if (held_job->state == JobState::kRunning) {
      lifecycle_.LoseRank(*held_job, failure);
    } else {
      lifecycle_.Finish(*held_job, JobState::kFailed, failure);
    }
  }
  lifecycle_.UpdateGauges();
  return result;
}

std::string WorkerSessions::ClaimHeldRank(const WorkerRegistration& reg, RegisteredWorker& entry,
                                          JobRecord* job, const RankSlot* slot,
                                          RegisterResult* result) {
  if (job == nullptr) {
    if (!reg.running_job_id.empty()) {
      LogInfo("worker ", reg.name, ": claims job ", reg.running_job_id,
              " which it does not hold; told to abandon it");
    }
    return "";
  }
  const std::string rank = RankName(reg.name, slot->pipeline_rank, slot->data_rank);
  const bool claims = reg.running_job_id == job->id &&
                      reg.running_pipeline_rank == slot->pipeline_rank &&
                      reg.running_data_rank == slot->data_rank;
  if (!claims || job->state != JobState::kRunning) {
    return absl::StrCat(rank, " re-registered without the job (it restarted and lost its state)");
  }
  // Also when it finished its rank meanwhile (running_job_finished): it then sends its buffered
  // reports and RankFinished again, and the rank completes the usual way. And when its rank failed
  // meanwhile (running_job_failed): its RankFailure follows, and is judged with the other ranks
  // (RankReports::Failed), so a peer that died is blamed rather than this survivor.
  result->resume_running_job = true;
  WorkerRegistry::Reserve(entry, job->id, slot->pipeline_rank, slot->data_rank);
  lifecycle_.recovery().Reconnected(job->id,
                                    slot->data_rank * job->spec.pipeline + slot->pipeline_rank);
  LogInfo("job ", job->id, ": ", rank,
          reg.running_job_finished ? " re-registered; it finished its rank meanwhile"
          : reg.running_job_failed ? " re-registered; its rank failed meanwhile"
                                   : " re-registered and continues");
  return "";
}

absl::Status WorkerSessions::Attach(const std::string& worker_id, const std::string& instance_id,
                                    WorkerConnection* connection) {
  absl::MutexLock lock(&lifecycle_.mu());
  if (absl::Status st =
          lifecycle_.workers().Attach(worker_id, instance_id, connection, clock_.Now());
      !st.ok()) {
    return st;
  }
  lifecycle_.TrySchedule();
  lifecycle_.UpdateGauges();
  return absl::OkStatus();
}

void WorkerSessions::Detach(const std::string& worker_id, WorkerConnection* connection) {
  absl::MutexLock lock(&lifecycle_.mu());
  RegisteredWorker* w = lifecycle_.workers().Detach(worker_id, connection);
  if (w == nullptr) return;
  // A peer already reported the broken connection: this worker is the rank that went away.
  if (w->info.state == WorkerState::kBusy) {
    JobRecord* job = lifecycle_.queue().Find(w->info.job_id);
    const std::string* pending = lifecycle_.recovery().PendingFailure(w->info.job_id);
    if (job != nullptr && job->state == JobState::kRunning && pending != nullptr) {
      const std::string then = *pending;
      lifecycle_.LoseRank(*job, absl::StrCat(RankName(w->info.registration.name,
                                                      w->info.pipeline_rank, w->info.data_rank),
                                             " lost: its session closed; then ", then));
    }
  }
  lifecycle_.UpdateGauges();
}

absl::Status WorkerSessions::Heartbeat(const std::string& worker_id,
                                       const std::string& running_job) {
  absl::MutexLock lock(&lifecycle_.mu());
  bool torn_down = false;
  if (absl::Status st =
          lifecycle_.workers().Heartbeat(worker_id, running_job, clock_.Now(), &torn_down);
      !st.ok()) {
    return st;
  }
  // It finished tearing a job down: it may be what a waiting job needs.
  if (torn_down) lifecycle_.TrySchedule();
  return absl::OkStatus();
}

void WorkerSessions::Leaving(const std::string& worker_id, const std::string& reason) {
  absl::MutexLock lock(&lifecycle_.mu());
  RegisteredWorker* w = lifecycle_.workers().ById(worker_id);
  if (w == nullptr || w->info.state == WorkerState::kDead) return;
  MarkDead(*w, absl::StrCat("left: ", reason.empty() ? "shutting down" : reason));
}

void WorkerSessions::CheckLiveness() {
  absl::MutexLock lock(&lifecycle_.mu());
  const absl::Time now = clock_.Now();
  metrics_.ExpireJobs(now);
  for (RegisteredWorker* w : lifecycle_.workers().SilentWorkers(now, heartbeat_timeout_)) {
    // Releasing an earlier one's job may have declared this one dead already.
    if (w->info.state == WorkerState::kDead) continue;
    MarkDead(*w, absl::StrCat("no heartbeat for ",
                              absl::FormatDuration(now - WorkerRegistry::LastSeen(*w, now))));
  }
  // Dead workers stay listed (ListWorkers include_dead) for a while, then are forgotten.
  lifecycle_.workers().ForgetDead(now);
  lifecycle_.CheckRecoveryDeadlines(now);
  // Changes the store refused (a full disk) are written again until it takes them.
  if (writer_.HasUnsaved()) lifecycle_.RetryUnsaved().IgnoreError();
}

void WorkerSessions::MarkDead(RegisteredWorker& w, std::string reason) {
  const std::string job_id = lifecycle_.workers().MarkDead(w, reason);
  JobRecord* job = job_id.empty() ? nullptr : lifecycle_.queue().Find(job_id);
  if (job != nullptr && !IsTerminal(job->state)) {
    std::string why =
        absl::StrCat(RankName(w.info.registration.name, w.info.pipeline_rank, w.info.data_rank),
                     " lost: ", reason);
    if (const std::string* pending = lifecycle_.recovery().PendingFailure(job_id)) {
      absl::StrAppend(&why, "; then ", *pending);
    }
    lifecycle_.LoseRank(*job, std::move(why));
  }
  lifecycle_.UpdateGauges();
}

absl::Status WorkerSessions::CheckAssigned(const std::string& worker_name,
                                           const std::string& job_id) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  return HoldsRankOf(lifecycle.queue(), worker_name, job_id);
}

absl::Status WorkerSessions::CheckAssignedInstance(const std::string& instance_id,
                                                   const std::string& job_id) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  if (std::optional<std::string> name = lifecycle.workers().NameByInstance(instance_id)) {
    return HoldsRankOf(lifecycle.queue(), *name, job_id);
  }
  return absl::PermissionDeniedError(
      "rendezvous: instance_id does not name a registered worker (send the instance_id the "
      "worker registered with)");
}

absl::StatusOr<std::string> WorkerSessions::WorkerName(const std::string& worker_id) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  return lifecycle.workers().NameOf(worker_id);
}

std::vector<WorkerInfo> WorkerSessions::List(bool include_dead) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  return lifecycle.workers().List(include_dead);
}

WorkerPage WorkerSessions::ListPage(bool include_dead, int page_size,
                                    const std::string& page_token) const {
  const JobLifecycle& lifecycle = lifecycle_;
  absl::ReaderMutexLock lock(&lifecycle.mu());
  return lifecycle.workers().ListPage(include_dead, page_size, page_token);
}

}  // namespace zpipe::coordinator
