// PrometheusMetrics: Metrics exported through a prometheus-cpp registry, and the HTTP exposer
// that serves it on /metrics.
//
// Cluster: zpipe_jobs{state}, zpipe_workers{state} (states lower case: "running", "idle"),
// zpipe_rpcs_total{method,code}, zpipe_store_write_errors_total, zpipe_store_unsaved_jobs (jobs
// whose latest change the full or failing store has not taken), zpipe_build_info.
// Per job and rank (labels job_id, pipeline_rank, data_rank; base units; updated as each rank's
// iteration report arrives):
//   zpipe_busy_seconds_total{op="F"|"B"|"W"}  compute time by op (a fused BW counts as B)
//   zpipe_idle_seconds_total                  iteration span minus busy time
//   zpipe_bubble_ratio                        measured, latest iteration: 1 - busy / span
//   zpipe_bubble_ratio_predicted              the plan re-simulated at the measured costs
//   zpipe_reduce_seconds_total                gradient all-reduce wall time
//   zpipe_exposed_reduce_seconds_total        the part of it that overlapped no compute
//   zpipe_reduce_overlap_ratio                latest iteration: 1 - exposed / total (1: none)
//   zpipe_p2p_wait_seconds_total              time blocked in receives
//   zpipe_step_seconds_total{phase}           optimizer step: "after_reduce" (after the last
//                                             reduction, on the critical path) or "overlapped"
//                                             (bucket by bucket during the iteration)
//   zpipe_rank_iterations_total               iterations the rank reported
//   zpipe_tokens_total                        tokens the rank processed (stage 0; GPT only)
// Per job (label job_id; updated when every rank has reported an iteration):
//   zpipe_job_bubble_ratio, zpipe_job_bubble_ratio_predicted   1 - sum(busy) / (p * d * span)
//   zpipe_job_reduce_overlap_ratio            1 - sum(exposed) / sum(reduce)
//   zpipe_iteration_duration_seconds          histogram of the iteration span (max over ranks)
//   zpipe_iterations_total                    iterations every rank has reported
//   zpipe_loss                                training loss, mean over data-parallel replicas
//                                             (none for synthetic models: they compute no loss)
//   zpipe_job_restarts_total                  automatic restarts (restart.max_restarts)
//   zpipe_job_state{state}                    1 once the job ended: "succeeded", "failed" or
//                                             "cancelled" (what ZPipeJobFailed fires on)
// Never a microbatch or iteration label.
//
// Bounded: a finished job's series stay `finished_job_retention` after JobFinished (so scrapes see
// the final values), then ExpireJobs removes them; beyond `max_finished_jobs` finished jobs the
// oldest go at once. A running job holds at least one worker, so live series are bounded by the
// cluster's size. Reports for a job whose series were removed are ignored.
#ifndef ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_
#define ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/metrics.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace zpipe::coordinator {

struct PrometheusMetricsOptions {
  absl::Duration finished_job_retention = absl::Minutes(10);
  int max_finished_jobs = 100;
};

class PrometheusMetrics : public Metrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  explicit PrometheusMetrics(prometheus::Registry& registry, PrometheusMetricsOptions options = {});

  void SetJobCount(JobState state, int64_t count) override;
  void SetWorkerCount(WorkerState state, int64_t count) override;
  void CountRpc(absl::string_view method, absl::StatusCode code) override;
  void JobRestarted(const std::string& job_id) override;
  void CountStoreWriteError() override { store_errors_.Increment(); }
  void SetStoreUnsavedJobs(int64_t count) override { store_unsaved_.Set(count); }

  void ObserveRankIteration(const std::string& job_id, int iteration,
                            const RankStats& stats) override;
  void ObserveJobIteration(const std::string& job_id, const IterationSummary& summary,
                           const std::optional<PredictedBubble>& predicted) override;
  void ObservePlanSwitch(const std::string& job_id, absl::string_view phase,
                         int plan_version) override;
  void JobFinished(const std::string& job_id, JobState state, absl::Time now) override;
  void ExpireJobs(absl::Time now) override;

  // Jobs whose series are exported now (for tests).
  int exported_jobs() const;

 private:
  struct RankSeries {
    prometheus::Counter* busy_f = nullptr;
    prometheus::Counter* busy_b = nullptr;
    prometheus::Counter* busy_w = nullptr;
    prometheus::Counter* idle = nullptr;
    prometheus::Gauge* bubble = nullptr;
    prometheus::Gauge* bubble_predicted = nullptr;  // from the first complete iteration on
    prometheus::Counter* reduce = nullptr;
    prometheus::Counter* exposed_reduce = nullptr;
    prometheus::Gauge* overlap = nullptr;
    prometheus::Counter* p2p_wait = nullptr;
    prometheus::Counter* step_after = nullptr;
    prometheus::Counter* step_overlapped = nullptr;
    prometheus::Counter* iterations = nullptr;
    prometheus::Counter* tokens = nullptr;
    int last_iteration = -1;
  };
  struct JobSeries {
    std::map<std::pair<int, int>, RankSeries> ranks;  // by (data_rank, pipeline_rank)
    prometheus::Gauge* bubble = nullptr;
    prometheus::Gauge* bubble_predicted = nullptr;
    prometheus::Gauge* overlap = nullptr;
    prometheus::Gauge* loss = nullptr;
    prometheus::Gauge* eval_loss = nullptr;
    prometheus::Histogram* duration = nullptr;
    prometheus::Counter* iterations = nullptr;
    prometheus::Gauge* plan_version = nullptr;                  // from the first re-plan on
    std::map<std::string, prometheus::Counter*> plan_switches;  // by phase
    prometheus::Counter* restarts = nullptr;                    // from the first restart on
    prometheus::Gauge* state = nullptr;                         // once finished
    int last_iteration = -1;
    std::optional<absl::Time> finished;
  };

  JobSeries* JobLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RankSeries& RankLocked(const std::string& job_id, JobSeries& job, int pipeline_rank,
                         int data_rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PrometheusMetricsOptions options_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Counter& store_errors_;
  prometheus::Gauge& store_unsaved_;
  // Per job and rank.
  prometheus::Family<prometheus::Counter>& busy_;
  prometheus::Family<prometheus::Counter>& idle_;
  prometheus::Family<prometheus::Gauge>& rank_bubble_;
  prometheus::Family<prometheus::Gauge>& rank_bubble_predicted_;
  prometheus::Family<prometheus::Counter>& reduce_;
  prometheus::Family<prometheus::Counter>& exposed_reduce_;
  prometheus::Family<prometheus::Gauge>& rank_overlap_;
  prometheus::Family<prometheus::Counter>& p2p_wait_;
  prometheus::Family<prometheus::Counter>& step_;
  prometheus::Family<prometheus::Counter>& rank_iterations_;
  prometheus::Family<prometheus::Counter>& tokens_;
  // Per job.
  prometheus::Family<prometheus::Gauge>& job_bubble_;
  prometheus::Family<prometheus::Gauge>& job_bubble_predicted_;
  prometheus::Family<prometheus::Gauge>& job_overlap_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& iterations_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& eval_loss_;
  prometheus::Family<prometheus::Gauge>& plan_version_;
  prometheus::Family<prometheus::Counter>& plan_switches_;
  prometheus::Family<prometheus::Gauge>& job_state_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> rpc_counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, JobSeries> job_series_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> finished_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  // Recently removed jobs (bounded), so a late report does not bring their series back.
  absl::flat_hash_set<std::string> removed_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> removed_order_ ABSL_GUARDED_BY(mu_);
};

// Serves `registry` on http://HOST:PORT/metrics. PORT 0 picks a free port (see the result's
// GetListeningPorts()). Unavailable when the address cannot be bound.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host_port, std::shared_ptr<prometheus::Registry> registry);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_
