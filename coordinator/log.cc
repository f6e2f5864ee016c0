#include "coordinator/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/sanitize.h"

namespace zpipe::coordinator {
namespace {
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

void LogLine(LogLevel level, absl::string_view message) {
  if (static_cast<int>(level) < min_level.load()) return;
  const char tag = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   std::string(1, tag), " ", core::SanitizeForTerminal(message), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write per line: no interleaving
}

}  // namespace zpipe::coordinator
