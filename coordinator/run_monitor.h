// RunMonitor: what the coordinator learns about running jobs from their workers. It turns
// progress batches into per-microbatch progress (ProgressTracker) and an executed timeline
// (TraceStore), keeps per-worker clock offsets, folds per-rank iteration reports into job-wide
// summaries, and feeds the per-job pipeline metrics (measured and predicted bubble).
//
// It holds no job table and takes no decision about jobs: the caller says when a job's attempt
// starts (StartJob), passes only reports from the worker holding the rank to ObserveIteration,
// and records summaries on the job record (RecordSummary).
//
// Thread-safe, and lock-free with respect to the job manager's lock: progress ingest runs beside
// scheduling. `metrics` is injected and must outlive the monitor.
#ifndef ZPIPE_COORDINATOR_RUN_MONITOR_H_
#define ZPIPE_COORDINATOR_RUN_MONITOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/metrics.h"
#include "coordinator/planner.h"
#include "coordinator/progress_tracker.h"
#include "coordinator/trace_store.h"

namespace zpipe::coordinator {

struct ProgressBatchData {
  std::string job_id;
  int pipeline_rank = 0;
  int data_rank = 0;
  ProgressEvents events;
  // Worker-clock seconds since the Unix epoch; empty or as long as the events.
  absl::Span<const double> start_times;
  absl::Span<const double> end_times;
  // Send / receive peers and reduce chunks / buckets (v1::ProgressBatch): empty or as long as the
  // events.
  absl::Span<const int32_t> peers;
  absl::Span<const int32_t> chunks;
  absl::Span<const int32_t> buckets;
};

class RunMonitor {
 public:
  explicit RunMonitor(Metrics& metrics, ProgressTracker::Options progress = {})
      : metrics_(metrics), tracker_(progress) {}

  // Starts following an attempt of a job on `ranks` (by global rank), replacing the previous
  // attempt's progress and timeline. `iterations_done`: iterations already complete (a job
  // reloaded after a coordinator restart), so progress resumes there.
  void StartJob(const std::string& job_id, const JobSpec& spec, const JobPlan& plan,
                const std::vector<RankSlot>& ranks, int iterations_done = 0);

  // A progress batch from `worker_name`, arrived at `now` (coordinator clock). Malformed or
  // unknown events are dropped and counted (dropped_events); compute events always count as
  // progress, sends / receives / reductions reach the timeline only with their peer / chunk /
  // bucket.
  void AddProgress(const std::string& worker_name, const ProgressBatchData& batch, absl::Time now);
  // A message from `worker_name` stamped `worker_time_s` (its clock, Unix seconds) arrived at
  // `now`: a sample for its clock offset.
  void ObserveClock(const std::string& worker_name, absl::Time now, double worker_time_s);

  // One rank's report of one iteration, arrived at `now`; the job-wide summaries it completes
  // (ProgressTracker::AddReport).
  std::vector<IterationSummary> AddReport(const std::string& job_id,
                                          const std::string& worker_name, int iteration,
                                          const RankStats& stats, std::optional<double> loss,
                                          std::optional<double> eval_loss, absl::Time now,
                                          bool* repeated = nullptr);
  // Pipeline metrics of an accepted report (from the worker holding the rank), and of the
  // iteration when `summary` completes it: the bubble the plan predicts at the measured costs
  // when `plan` is known (a simulation: call it without holding locks). Returns that job-wide
  // bubble, for the summary (nullopt when `summary` is unset or it could not be computed).
  std::optional<double> ObserveIteration(const std::string& job_id, int iteration, const RankStats& stats,
                        const std::optional<IterationSummary>& summary,
                        const std::shared_ptr<const JobPlan>& plan);
  // Records an iteration's summary on `job`: iterations done, the attempt's first iteration (and
  // its "resumed at" reason), the latest summary. Returns the history event to append.
  static JobEvent RecordSummary(JobRecord& job, IterationSummary summary, absl::Time now);
  // The job's log line for a completed iteration (`zpipe logs`): "iteration 12: loss 3.4521,
  // eval loss 3.6012, 4210 tokens/s, bubble 11.8% (predicted 10.2% at measured costs, planned
  // 9.0%)"; tokens/s are every rank's tokens over the iteration's duration; loss, eval loss and
  // the prediction at measured costs only where known.
  static std::string IterationLogLine(const IterationSummary& summary);

  // A re-plan switched the job to `plan`: later summaries carry its predicted bubble.
  void SwitchPlan(const std::string& job_id, const JobPlan& plan) {
    tracker_.SetPredictedBubble(job_id, plan.sim.bubble_rate);
  }

  // Drops the job's progress and timeline (a deleted job).
  void Forget(const std::string& job_id) {
    tracker_.Forget(job_id);
    traces_.Forget(job_id);
  }

  // nullopt for a job never started.
  std::optional<JobProgressView> Progress(const std::string& job_id, bool with_microbatches) const {
    return tracker_.Get(job_id, with_microbatches);
  }
  // Changes whenever the job's progress does (WatchJob polls it).
  uint64_t ProgressVersion(const std::string& job_id) const { return tracker_.Version(job_id); }
  uint64_t dropped_events() const { return tracker_.dropped_events(); }
  // See TraceStore::Get.
  absl::StatusOr<JobTrace> Trace(const std::string& job_id, std::optional<int> iteration) const {
    return traces_.Get(job_id, iteration);
  }

 private:
  Metrics& metrics_;
  ProgressTracker tracker_;
  TraceStore traces_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_RUN_MONITOR_H_
