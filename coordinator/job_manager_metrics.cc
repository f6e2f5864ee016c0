// JobManager: the per-job pipeline metrics hook (see metrics.h and measured_bubble.h).
#include "coordinator/job_manager.h"
#include "coordinator/log.h"
#include "coordinator/measured_bubble.h"

namespace zpipe::coordinator {

void JobManager::ObserveIterationMetrics(const std::string& worker_name, const std::string& job_id,
                                         int iteration, const RankStats& stats,
                                         const std::optional<IterationSummary>& summary) {
  std::shared_ptr<const JobPlan> plan;
  {
    absl::ReaderMutexLock lock(&mu_);
    const JobRecord* job = FindJobLocked(job_id);
    if (job == nullptr || job->state != JobState::kRunning) return;
    if (!workers_.HoldsRank(worker_name, job_id, stats.pipeline_rank, stats.data_rank)) {
      return;  // not from the worker holding that rank
    }
    if (auto rt = runtime_.find(job_id); rt != runtime_.end()) plan = rt->second.plan;
  }
  metrics_.ObserveRankIteration(job_id, iteration, stats);
  if (!summary) return;
  std::optional<PredictedBubble> predicted;
  if (plan != nullptr) {
    // Outside the lock: a simulation of the whole plan, once per completed iteration.
    absl::StatusOr<PredictedBubble> p = PredictBubbleAtMeasuredCosts(*plan, summary->ranks);
    if (p.ok()) {
      predicted = *std::move(p);
    } else {
      LogWarning("job ", job_id, ": no predicted bubble at measured costs: ", p.status().message());
    }
  }
  metrics_.ObserveJobIteration(job_id, *summary, predicted);
}

}  // namespace zpipe::coordinator
