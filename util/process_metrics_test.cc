#include "util/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace zpipe::util {
namespace {

TEST(ProcessMetricsTest, ReadsThisProcess) {
  absl::StatusOr<ProcessStats> before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  // Burn 0.3 s of this process's CPU (however long that takes on a loaded machine), hold a few
  // more descriptors and a thread, and grow the resident set by 64 MiB.
  volatile double sink = 0;
  const std::clock_t until = std::clock() + CLOCKS_PER_SEC * 3 / 10;
  while (std::clock() < until) sink = sink + 1;
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  std::vector<char> memory(64 << 20, 1);
  bool stop = false;
  std::thread sleeper([&] {
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  absl::StatusOr<ProcessStats> after = ReadProcessStats();
  __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
  sleeper.join();
  for (int fd : fds) close(fd);
  ASSERT_TRUE(after.ok()) << after.status();

  EXPECT_GE(after->cpu_seconds - before->cpu_seconds, 0.2);
  EXPECT_EQ(after->open_fds - before->open_fds, 5);
  EXPECT_GE(after->threads, before->threads + 1);
  EXPECT_GE(after->resident_bytes - before->resident_bytes, 60.0 * (1 << 20)) << memory[123];
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  EXPECT_GE(after->max_fds, after->open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GT(after->start_time_seconds, now - 3600) << "this test started over an hour ago?";
}

TEST(ProcessMetricsTest, FamiliesUseThePrometheusClientNames) {
  std::map<std::string, prometheus::MetricType> got;
  for (const prometheus::MetricFamily& f : ProcessMetricFamilies()) {
    ASSERT_EQ(f.metric.size(), 1u) << f.name;
    got[f.name] = f.type;
  }
  const std::map<std::string, prometheus::MetricType> want = {
      {"process_cpu_seconds_total", prometheus::MetricType::Counter},
      {"process_resident_memory_bytes", prometheus::MetricType::Gauge},
      {"process_virtual_memory_bytes", prometheus::MetricType::Gauge},
      {"process_open_fds", prometheus::MetricType::Gauge},
      {"process_max_fds", prometheus::MetricType::Gauge},
      {"process_threads", prometheus::MetricType::Gauge},
      {"process_start_time_seconds", prometheus::MetricType::Gauge}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace zpipe::util
