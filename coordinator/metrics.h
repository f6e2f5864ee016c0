// Metrics: the coordinator's cluster gauges and RPC counters, and the per-job pipeline metrics
// made from worker iteration reports, behind an interface so job logic can be tested with
// NullMetrics / a recording fake. Implementations are thread-safe.
#ifndef ZPIPE_COORDINATOR_METRICS_H_
#define ZPIPE_COORDINATOR_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

// The job's plan re-simulated with the per-stage F/B/W durations its workers measured in one
// iteration (see measured_bubble.h): the bubble the schedule itself implies at those costs.
struct PredictedBubble {
  double job = 0;             // bubble rate, 1 - sum(busy) / (p * d * span)
  std::vector<double> ranks;  // per global rank (data_rank * p + pipeline_rank)
};

class Metrics {
 public:
  virtual ~Metrics() = default;
  virtual void SetJobCount(JobState state, int64_t count) = 0;        // zpipe_jobs{state}
  virtual void SetWorkerCount(WorkerState state, int64_t count) = 0;  // zpipe_workers{state}
  virtual void CountRpc(absl::string_view method, absl::StatusCode code) = 0;  // zpipe_rpcs_total
  // A job lost a rank and was restarted automatically (zpipe_job_restarts_total{job_id}).
  virtual void JobRestarted(const std::string& /*job_id*/) {}
  // The job store refused a write (zpipe_store_write_errors_total).
  virtual void CountStoreWriteError() {}
  // Jobs whose latest change the store has not taken yet (zpipe_store_unsaved_jobs; 0 = all
  // stored).
  virtual void SetStoreUnsavedJobs(int64_t /*count*/) {}

  // ---- per job and rank (no-ops by default) ----
  // One rank's report of one iteration, from the worker that holds that rank of a RUNNING job.
  // Implementations count each (job, rank, iteration) once.
  virtual void ObserveRankIteration(const std::string& /*job_id*/, int /*iteration*/,
                                    const RankStats& /*stats*/) {}
  // Every rank has reported `summary.iteration`; `predicted` is nullopt when the re-simulation
  // could not be made.
  virtual void ObserveJobIteration(const std::string& /*job_id*/,
                                   const IterationSummary& /*summary*/,
                                   const std::optional<PredictedBubble>& /*predicted*/) {}
  // A re-plan of the job (schedule.replan_every) reached `phase` ("scheduled", "applied",
  // "abandoned"); `plan_version` is the version running after it.
  virtual void ObservePlanSwitch(const std::string& /*job_id*/, absl::string_view /*phase*/,
                                 int /*plan_version*/) {}
  // The job reached terminal state `state` at `now` (zpipe_job_state{job_id,state}): its series
  // stay for a retention period (so the last scrape sees the final values, and an alert can name
  // the job), then ExpireJobs drops them.
  virtual void JobFinished(const std::string& /*job_id*/, JobState /*state*/, absl::Time /*now*/) {}
  // Drops the series of jobs finished long enough before `now`. Called periodically.
  virtual void ExpireJobs(absl::Time /*now*/) {}
};

class NullMetrics : public Metrics {
 public:
  void SetJobCount(JobState, int64_t) override {}
  void SetWorkerCount(WorkerState, int64_t) override {}
  void CountRpc(absl::string_view, absl::StatusCode) override {}
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_METRICS_H_
