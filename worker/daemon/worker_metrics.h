// The worker's own Prometheus metrics (served on --metrics-listen for a Kubernetes PodMonitor).
//
// Names follow docs/design.md "Metrics": prefix zpipe_worker_, base units, label job_id plus the
// rank labels; never a microbatch or iteration label. Updated as each iteration completes. A job's
// series stay `finished_job_retention` after it ends (so the last scrapes see the final values),
// then are removed, so a long-lived worker exports only its recent jobs.
#ifndef ZPIPE_WORKER_DAEMON_WORKER_METRICS_H_
#define ZPIPE_WORKER_DAEMON_WORKER_METRICS_H_

#include <memory>
#include <string>

namespace prometheus {
class Registry;
}  // namespace prometheus

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/executor/executor.h"

namespace zpipe::worker {

class WorkerMetrics {
 public:
  virtual ~WorkerMetrics() = default;
  virtual void OnIteration(const std::string& job_id, int pipeline_rank, int data_rank,
                           const IterationSummary& summary) = 0;
  virtual void OnJobEnd(const std::string& job_id, bool ok) = 0;
  virtual void SetBusy(bool busy) = 0;
};

// Serves /metrics on `listen` ("HOST:PORT"); fails when the address cannot be bound.
absl::StatusOr<std::unique_ptr<WorkerMetrics>> NewPrometheusWorkerMetrics(
    const std::string& listen, const std::string& worker,
    absl::Duration finished_job_retention = absl::Minutes(10));

// The same metrics in `registry` (which must outlive them), served by the caller (tests).
std::unique_ptr<WorkerMetrics> NewPrometheusWorkerMetrics(
    std::shared_ptr<prometheus::Registry> registry, const std::string& worker,
    absl::Duration finished_job_retention);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_WORKER_METRICS_H_
