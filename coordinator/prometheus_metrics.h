// PrometheusMetrics: Metrics exported through a prometheus-cpp registry, and the HTTP exposer
// that serves it on /metrics.
#ifndef ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_
#define ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/metrics.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace zpipe::coordinator {

class PrometheusMetrics : public Metrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  explicit PrometheusMetrics(prometheus::Registry& registry);

  void SetJobCount(JobState state, int64_t count) override;
  void SetWorkerCount(WorkerState state, int64_t count) override;
  void CountRpc(absl::string_view method, absl::StatusCode code) override;

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> rpc_counters_ ABSL_GUARDED_BY(mu_);
};

// Serves `registry` on http://HOST:PORT/metrics. PORT 0 picks a free port (see the result's
// GetListeningPorts()). Unavailable when the address cannot be bound.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host_port, std::shared_ptr<prometheus::Registry> registry);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_PROMETHEUS_METRICS_H_
