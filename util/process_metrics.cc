#include "util/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace zpipe::util {
namespace {

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The system's boot time, Unix seconds ("btime" in /proc/stat).
absl::StatusOr<double> BootTime() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    double btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &btime)) return btime;
  }
  return absl::DataLossError("/proc/stat has no btime line");
}

// /proc/self/stat's fields after the command name (which may hold spaces and parentheses, so
// the split starts after the last ')'): [0] is field 3, the state.
absl::StatusOr<std::vector<std::string>> StatFields() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return absl::DataLossError("/proc/self/stat: no command name");
  return std::vector<std::string>(absl::StrSplit(absl::string_view(*stat).substr(close + 2), ' ',
                                                 absl::SkipEmpty()));
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric sample;
  if (type == prometheus::MetricType::Counter) {
    sample.counter.value = value;
  } else {
    sample.gauge.value = value;
  }
  return prometheus::MetricFamily{name, help, type, {sample}};
}

}  // namespace

absl::StatusOr<ProcessStats> ReadProcessStats() {
  absl::StatusOr<std::vector<std::string>> f = StatFields();
  if (!f.ok()) return f.status();
  // Fields 14 utime, 15 stime, 20 num_threads, 22 starttime (clock ticks since boot), 23 vsize
  // (bytes), 24 rss (pages): proc(5).
  auto field = [&](int number, double* out) {
    const size_t i = static_cast<size_t>(number - 3);
    return i < f->size() && absl::SimpleAtod((*f)[i], out);
  };
  double utime = 0, stime = 0, threads = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(20, &threads) ||
      !field(22, &start_ticks) || !field(23, &vsize) || !field(24, &rss_pages)) {
    return absl::DataLossError("/proc/self/stat: too few fields or one is not a number");
  }
  absl::StatusOr<double> boot = BootTime();
  if (!boot.ok()) return boot.status();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessStats s;
  s.cpu_seconds = (utime + stime) / ticks;
  s.threads = threads;
  s.start_time_seconds = *boot + start_ticks / ticks;
  s.virtual_bytes = vsize;
  s.resident_bytes = rss_pages * static_cast<double>(sysconf(_SC_PAGESIZE));
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++s.open_fds;
  }
  if (error) return absl::UnavailableError("cannot list /proc/self/fd: " + error.message());
  --s.open_fds;  // the directory_iterator's own descriptor
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) s.max_fds = static_cast<double>(limit.rlim_cur);
  return s;
}

std::vector<prometheus::MetricFamily> ProcessMetricFamilies() {
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  if (!s.ok()) return {};
  using prometheus::MetricType;
  return {
      Family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             MetricType::Counter, s->cpu_seconds),
      Family("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
             s->resident_bytes),
      Family("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
             s->virtual_bytes),
      Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
             s->open_fds),
      Family("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
             s->max_fds),
      Family("process_threads", "Number of OS threads in the process.", MetricType::Gauge,
             s->threads),
      Family("process_start_time_seconds",
             "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
             s->start_time_seconds),
  };
}

}  // namespace zpipe::util
