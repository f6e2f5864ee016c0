// Metrics: the coordinator's cluster gauges and RPC counters, behind an interface so job logic
// can be tested with NullMetrics / a recording fake. Implementations are thread-safe.
#ifndef ZPIPE_COORDINATOR_METRICS_H_
#define ZPIPE_COORDINATOR_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

class Metrics {
 public:
  virtual ~Metrics() = default;
  virtual void SetJobCount(JobState state, int64_t count) = 0;           // zpipe_jobs{state}
  virtual void SetWorkerCount(WorkerState state, int64_t count) = 0;     // zpipe_workers{state}
  virtual void CountRpc(absl::string_view method, absl::StatusCode code) = 0;  // zpipe_rpcs_total
};

class NullMetrics : public Metrics {
 public:
  void SetJobCount(JobState, int64_t) override {}
  void SetWorkerCount(WorkerState, int64_t) override {}
  void CountRpc(absl::string_view, absl::StatusCode) override {}
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_METRICS_H_
