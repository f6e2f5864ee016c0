#include "coordinator/prometheus_metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {

PrometheusMetrics::PrometheusMetrics(prometheus::Registry& registry)
    : jobs_(prometheus::BuildGauge()
                .Name("zpipe_jobs")
                .Help("Jobs known to the coordinator, by state")
                .Register(registry)),
      workers_(prometheus::BuildGauge()
                   .Name("zpipe_workers")
                   .Help("Registered workers, by state")
                   .Register(registry)),
      rpcs_(prometheus::BuildCounter()
                .Name("zpipe_rpcs_total")
                .Help("gRPC calls handled, by method and status code")
                .Register(registry)) {
  // Every state is exported from the start, so dashboards see zeros rather than gaps.
  for (JobState s : kAllJobStates) SetJobCount(s, 0);
  for (WorkerState s : kAllWorkerStates) SetWorkerCount(s, 0);
}

void PrometheusMetrics::SetJobCount(JobState state, int64_t count) {
  jobs_.Add({{"state", std::string(JobStateName(state))}}).Set(static_cast<double>(count));
}

void PrometheusMetrics::SetWorkerCount(WorkerState state, int64_t count) {
  workers_.Add({{"state", std::string(WorkerStateName(state))}}).Set(static_cast<double>(count));
}

void PrometheusMetrics::CountRpc(absl::string_view method, absl::StatusCode code) {
  const std::string code_name = absl::StatusCodeToString(code);
  const std::string key = absl::StrCat(method, "|", code_name);
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto it = rpc_counters_.find(key);
    if (it == rpc_counters_.end()) {
      counter = &rpcs_.Add({{"method", std::string(method)}, {"code", code_name}});
      rpc_counters_.emplace(key, counter);
    } else {
      counter = it->second;
    }
  }
  counter->Increment();
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host_port, std::shared_ptr<prometheus::Registry> registry) {
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(host_port, /*num_threads=*/1);
    exposer->RegisterCollectable(registry);
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host_port, ": ", e.what()));
  }
}

}  // namespace zpipe::coordinator
