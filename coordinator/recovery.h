// Recovery: what the coordinator does when a rank of a job is lost, and how it picks running jobs
// up again after a restart. It decides and keeps the per-job recovery state; the job manager
// carries the decisions out (state changes, releasing workers, scheduling).
//
// Lost ranks: a rank of a RUNNING job is lost when its worker dies, leaves, re-registers without
// the job, or reports a failure. A reported failure first waits `failure_grace` for the loss of
// another rank to show (DeferFailure), so the reason names the rank that died rather than the
// survivor whose connection to it broke (BlameLostRank). With spec.max_restarts left, OnRankLost
// closes the attempt, counts the restart and holds the job back for spec.restart_backoff
// (HeldBack); otherwise the job fails.
//
// Restart reconciliation (Reconcile, on every job loaded from the store): SCHEDULING jobs go back
// to PENDING (their assignments may not all have arrived); RESTARTING jobs may be scheduled at
// once; RUNNING jobs wait `recovery_grace` for their workers to re-register and claim their ranks
// (Reconnected); a rank still missing at the deadline is lost (DueLoss).
//
// Not thread-safe: the owner serializes every call (JobLifecycle guards it with its lock).
#ifndef ZPIPE_COORDINATOR_RECOVERY_H_
#define ZPIPE_COORDINATOR_RECOVERY_H_

#include <optional>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"
#include "coordinator/worker_registry.h"

namespace zpipe::coordinator {

class Recovery {
 public:
  // failure_grace: how long a reported failure waits for a lost peer (0 = not at all);
  // recovery_grace: how long a reloaded RUNNING job waits for its workers.
  Recovery(absl::Duration failure_grace, absl::Duration recovery_grace);

  // Ends the job's current attempt record (if still open) at `now` with `reason`.
  static void CloseAttempt(JobRecord& job, const std::string& reason, absl::Time now);

  // For a job just loaded from the store. Returns the reason to queue it again when it was
  // SCHEDULING (its attempt is closed and its ranks cleared; the caller moves it to PENDING);
  // otherwise starts the wait of a RESTARTING or RUNNING job and returns nullopt.
  std::optional<std::string> Reconcile(JobRecord& job, absl::Time now);
  // The worker of global rank `global_rank` of reloaded RUNNING job `job_id` came back with it.
  void Reconnected(const std::string& job_id, int global_rank);

  struct Decision {
    bool restart = false;  // RESTARTING (else FAILED)
    std::string reason;    // what the job's new state says
  };
  // A rank of `job` was lost for `reason`. RUNNING with restarts left: closes the attempt, counts
  // the restart and holds the job back until the backoff is over (restart = true). Otherwise
  // restart = false and `reason` says, when restarts were on, that none are left.
  Decision OnRankLost(JobRecord& job, std::string reason, absl::Time now);

  // The first rank of `job`, other than `except_worker`'s, whose worker is gone (dead,
  // disconnected, unknown or on another job), named with why: the cause to blame for a failure.
  static std::optional<std::string> BlameLostRank(const JobRecord& job,
                                                  const std::string& except_worker,
                                                  const WorkerRegistry& workers);
  // `failed` was reported by a rank of `job`. True when it waits for a lost peer to blame (a
  // RUNNING job with a failure_grace; only the first report is kept); false when the job should
  // lose the rank at once. A job reloaded after a restart whose workers are not all back waits
  // until they are, or until recovery_grace ends: a peer not back by then is the one to blame.
  // `peer_lost`: the rank said its failure is an effect (its connection to a peer broke).
  bool DeferFailure(const JobRecord& job, const std::string& failed, absl::Time now,
                    bool peer_lost = false);
  // The failure the job waits on when it is an effect (a peer_lost report), taken: a rank's own
  // failure reported meanwhile is its cause. nullopt (and nothing taken) otherwise.
  std::optional<std::string> TakeEffectFailure(const std::string& job_id);
  // A job reloaded after a restart, some of whose workers have not come back yet.
  bool AwaitingReconnect(const std::string& job_id) const;
  // The failure the job waits on, or null.
  const std::string* PendingFailure(const std::string& job_id) const;
  // Why RUNNING `job` loses a rank at `now`: it was reloaded and a worker did not come back in
  // time (reported once; with a pending failure as its effect), or its pending failure's grace
  // ran out (no peer to blame). nullopt when nothing is due.
  std::optional<std::string> DueLoss(const JobRecord& job, absl::Time now);

  // A RESTARTING job whose backoff is not over at `now` (it holds its device kind's queue).
  bool HeldBack(const std::string& job_id, absl::Time now) const;
  // A RESTARTING job whose backoff ran out by `now` (it is worth scheduling).
  bool RestartDue(const std::string& job_id, absl::Time now) const;
  // What a RESTARTING job says while it waits ("" for others).
  std::string RestartReason(const std::string& job_id) const;

  // The job got workers: its backoff is over.
  void Scheduled(const std::string& job_id);
  // The job's assignments went out: the reconnection wait of a reload is over.
  void Dispatched(const std::string& job_id);
  // The job reached a terminal state.
  void Finished(const std::string& job_id);
  // Drops what is kept about the job (a deleted job).
  void Forget(const std::string& job_id) { jobs_.erase(job_id); }

 private:
  struct JobRecovery {
    // RUNNING: a rank reported a failure and the job waits for a lost peer to blame; `reason` is
    // what it fails with when none shows.
    struct PendingFailure {
      std::string reason;
      absl::Time deadline;
      bool peer_lost = false;  // an effect: the reporting rank's connection to a peer broke
    };
    std::optional<PendingFailure> pending_failure;
    std::optional<absl::Time> reconnect_deadline;  // RUNNING after a restart
    std::set<int> reconnected;                     // global ranks whose worker came back
    // RESTARTING: not scheduled before this; the reason the attempt ended.
    std::optional<absl::Time> restart_at;
    std::string restart_reason;
  };

  const absl::Duration failure_grace_;
  const absl::Duration recovery_grace_;
  absl::flat_hash_map<std::string, JobRecovery> jobs_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_RECOVERY_H_
