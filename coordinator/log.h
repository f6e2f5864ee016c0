// Minimal line logging to stderr ("2026-01-01T00:00:00.123Z I job j1: PENDING -> SCHEDULING").
// abseil 20220623 has no absl/log, and the coordinator needs nothing more.
#ifndef ZPIPE_COORDINATOR_LOG_H_
#define ZPIPE_COORDINATOR_LOG_H_

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::coordinator {

enum class LogLevel { kInfo, kWarning, kError };

// Thread-safe; one line per call. Messages below the minimum level are dropped. Messages quote
// peers' strings (worker names and hosts, failure reasons, job names) as received, so the message
// is written through core::SanitizeForTerminal: it stays one line and carries no terminal controls.
void LogLine(LogLevel level, absl::string_view message);
void SetMinLogLevel(LogLevel level);

template <typename... Args>
void LogInfo(const Args&... args) {
  LogLine(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  LogLine(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  LogLine(LogLevel::kError, absl::StrCat(args...));
}

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_LOG_H_
