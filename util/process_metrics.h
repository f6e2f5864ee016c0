// The process metrics every Prometheus client library exports, for zpipe-coordinator's and
// zpipe-worker's /metrics, read from /proc/self at each scrape:
//   process_cpu_seconds_total       user + system CPU time
//   process_resident_memory_bytes   resident set size
//   process_virtual_memory_bytes    virtual memory size
//   process_open_fds                open file descriptors
//   process_max_fds                 the descriptor limit (RLIMIT_NOFILE, soft)
//   process_threads                 threads
//   process_start_time_seconds      start time, Unix seconds
// The names and meanings are the Prometheus client libraries' own (prometheus-cpp has none), so
// dashboards and alerts written for other services work on ours. A separate library from
// zpipe::util: this one depends on prometheus-cpp.
#ifndef ZPIPE_UTIL_PROCESS_METRICS_H_
#define ZPIPE_UTIL_PROCESS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <vector>

#include "absl/status/statusor.h"

namespace zpipe::util {

struct ProcessStats {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double threads = 0;
  double start_time_seconds = 0;
};

// This process's numbers now. An error names the /proc file it could not read or parse.
absl::StatusOr<ProcessStats> ReadProcessStats();

// The families above, from ReadProcessStats; none when /proc cannot be read (not Linux).
std::vector<prometheus::MetricFamily> ProcessMetricFamilies();

// ProcessMetricFamilies for a prometheus::Exposer (RegisterCollectable keeps a weak_ptr: the
// owner keeps the shared_ptr).
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    return ProcessMetricFamilies();
  }
};

}  // namespace zpipe::util

#endif  // ZPIPE_UTIL_PROCESS_METRICS_H_
