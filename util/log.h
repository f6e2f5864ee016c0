// The services' one logger: every line zpipe-coordinator and zpipe-worker log goes through
// LogLine (or LogInfo, LogWarning, LogError, Log), which writes it to stderr in this process's
// LogFormat and hands it to the installed LogSink, if any.
//
// Each binary keeps the form its operators, scripts and tests know:
//   zpipe-coordinator (the default LogFormat)   2026-01-01T00:00:00.123Z I job j1: queued
//   zpipe-worker (a prefix, the line as written)  zpipe-worker: registered as w0
// The coordinator's lines quote peers' strings as received (worker names and hosts, failure
// reasons, job names), so its form writes the message through util::SanitizeForTerminal: it stays
// one line and carries no terminal controls. The worker's lines are its own (a LibTorch error may
// span lines) and go out as written; `zpipe logs` sanitises them where it shows them.
//
// abseil 20220623 (Debian 12) has no absl/log, and the services need nothing more. The functions
// live in namespace zpipe, not zpipe::util, so that code in every component's namespace calls them
// unqualified.
#ifndef ZPIPE_UTIL_LOG_H_
#define ZPIPE_UTIL_LOG_H_

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace zpipe {

enum class LogLevel { kInfo, kWarning, kError };

// How a line looks on stderr: `prefix`, then (with `timestamp`) the UTC time to the millisecond
// and the level's letter (I, W, E), then the message, through SanitizeForTerminal with `sanitize`.
struct LogFormat {
  std::string prefix;
  bool timestamp = true;
  bool sanitize = true;
};

// Receives every line logged (at or above the minimum level), as given, with the time it was
// logged: zpipe-worker's JobLog keeps a running rank's lines for the coordinator (`zpipe logs`).
class LogSink {
 public:
  virtual ~LogSink() = default;
  // Called for every line, from the thread that logged it: must be thread-safe and must not log.
  virtual void Write(absl::Time time, std::string_view line) = 0;
};

// Thread-safe; one write to stderr per call, so lines from several threads never interleave.
// `message` has no trailing newline. Messages below the minimum level are dropped.
void LogLine(LogLevel level, std::string_view message);

// Process-wide settings, for main (and tests); each takes effect for the lines logged after it.
void SetLogFormat(LogFormat format);
void SetMinLogLevel(LogLevel level);
// nullptr removes the sink; once that returns, no Write is in flight. The sink must stay alive
// until it is removed.
void SetLogSink(LogSink* sink);

// An informational line (the worker's plain form).
inline void Log(std::string_view line) { LogLine(LogLevel::kInfo, line); }

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

}  // namespace zpipe

#endif  // ZPIPE_UTIL_LOG_H_
