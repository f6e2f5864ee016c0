#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "util/sanitize.h"

namespace zpipe {
namespace {

ABSL_CONST_INIT absl::Mutex mu(absl::kConstInit);
// Allocated once and never freed, so that a thread still logging at exit never sees it destroyed;
// nullptr = the default LogFormat.
LogFormat* format ABSL_GUARDED_BY(mu) = nullptr;
LogSink* sink ABSL_GUARDED_BY(mu) = nullptr;
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

char LevelLetter(LogLevel level) {
  return level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
}

std::string FormatLine(const LogFormat& f, LogLevel level, absl::Time time,
                       std::string_view message) {
  std::string line = f.prefix;
  if (f.timestamp) {
    absl::StrAppend(&line, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()),
                    " ", std::string(1, LevelLetter(level)), " ");
  }
  if (f.sanitize) {
    line += util::SanitizeForTerminal(absl::string_view(message.data(), message.size()));
  } else {
    line += message;
  }
  line += '\n';
  return line;
}

}  // namespace

void SetLogFormat(LogFormat new_format) {
  absl::MutexLock lock(&mu);
  if (format == nullptr) {
    format = new LogFormat(std::move(new_format));
  } else {
    *format = std::move(new_format);
  }
}

void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

void SetLogSink(LogSink* new_sink) {
  absl::MutexLock lock(&mu);
  sink = new_sink;
}

void LogLine(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < min_level.load()) return;
  const absl::Time now = absl::Now();
  // Held while writing: lines reach stderr and the sink in the same order, and SetLogSink(nullptr)
  // returns only once no Write is in flight.
  absl::MutexLock lock(&mu);
  const std::string line =
      FormatLine(format != nullptr ? *format : LogFormat{}, level, now, message);
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write per line: no interleaving
  std::fflush(stderr);
  if (sink != nullptr) sink->Write(now, message);
}

}  // namespace zpipe
