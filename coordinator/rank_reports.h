// RankReports: what a rank of a running job reports: an iteration done (its stats, loss and
// timings), its end (every iteration done), or its failure. Iteration reports are folded into
// job-wide summaries (RunMonitor), recorded on the job with an event and a log line, and feed the
// re-planner (JobPlans); a job whose ranks all finished SUCCEEDS; a failure loses the rank
// (job_lifecycle.h), after the failure grace looks for a lost peer to blame (recovery.h).
//
// Thread-safe: works under JobLifecycle's lock (job_lifecycle.h), which it takes itself, and
// leaves it for the expensive steps (simulating a plan at the measured costs, proposing a
// re-plan), which run on copies.
#ifndef ZPIPE_COORDINATOR_RANK_REPORTS_H_
#define ZPIPE_COORDINATOR_RANK_REPORTS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_log_store.h"
#include "coordinator/job_plans.h"
#include "coordinator/run_monitor.h"

namespace zpipe::coordinator {

class RankReports {
 public:
  // The collaborators are injected and must outlive the reports.
  RankReports(Clock& clock, JobLifecycle& lifecycle, JobPlans& plans, RunMonitor& monitor,
              JobEventLog& events, JobLogStore& logs)
      : clock_(clock),
        lifecycle_(lifecycle),
        plans_(plans),
        monitor_(monitor),
        events_(events),
        logs_(logs) {}

  // The contracts of these are JobManager's (job_manager.h).
  absl::Status Iteration(const std::string& worker_id, const std::string& job_id, int iteration,
                         const RankStats& stats, std::optional<double> loss,
                         std::optional<double> eval_loss) ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::Status Finished(const std::string& worker_id, const std::string& job_id, int pipeline_rank,
                        int data_rank) ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  absl::Status Failed(const std::string& worker_id, const std::string& job_id, int pipeline_rank,
                      int data_rank, const std::string& message, bool permanent, bool peer_lost)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());

 private:
  absl::StatusOr<std::string> WorkerName(const std::string& worker_id) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  // The plan of RUNNING job `job_id` (null when it has none) when `worker_name` holds the rank
  // `stats` is about; nullopt when the report is not from the rank's holder.
  std::optional<std::shared_ptr<const JobPlan>> HolderPlan(const std::string& worker_name,
                                                           const std::string& job_id,
                                                           const RankStats& stats) const
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  // Records the completed `summaries` on the job (events, log lines, store); returns the inputs of
  // a re-plan check when `iteration`'s summary makes one due.
  std::optional<ReplanCheck> Record(const std::string& job_id, int iteration,
                                    std::vector<IterationSummary> summaries)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  // Proposes a plan from the measured costs of `check` and switches to it when it is better.
  void Replan(const std::string& job_id, const ReplanCheck& check)
      ABSL_LOCKS_EXCLUDED(lifecycle_.mu());
  // The registered worker `worker_id` when it holds that rank of `job_id`; else the error.
  absl::StatusOr<RegisteredWorker*> Holder(const std::string& worker_id, const std::string& job_id,
                                           int pipeline_rank, int data_rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_.mu());

  Clock& clock_;
  JobLifecycle& lifecycle_;
  JobPlans& plans_;
  RunMonitor& monitor_;
  JobEventLog& events_;
  JobLogStore& logs_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_RANK_REPORTS_H_
