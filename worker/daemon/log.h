// The worker's log: every line the daemon writes goes through Log(), which writes it to stderr as
// "zpipe-worker: LINE" and hands it to the installed LogSink. zpipe-worker's main installs the
// daemon's JobLog, which keeps the lines written while a job runs for the coordinator
// (`zpipe logs`); without a sink (tests that embed a daemon) lines only go to stderr.
#ifndef ZPIPE_WORKER_DAEMON_LOG_H_
#define ZPIPE_WORKER_DAEMON_LOG_H_

#include <string_view>

#include "absl/time/time.h"

namespace zpipe::worker {

class LogSink {
 public:
  virtual ~LogSink() = default;
  // Called for every line, from the thread that logged it: must be thread-safe and must not log.
  virtual void Write(absl::Time time, std::string_view line) = 0;
};

// Thread-safe. `line` has no trailing newline.
void Log(std::string_view line);

// Process-wide (main only); nullptr removes it. The sink must stay alive until it is removed.
void SetLogSink(LogSink* sink);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_LOG_H_
