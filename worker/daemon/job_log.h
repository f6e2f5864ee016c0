// JobLog: the log lines a worker writes while it runs a rank of a job, kept until the daemon sends
// them to the coordinator (worker.proto JobLogBatch; `zpipe logs`).
//
// Bounded: at most `max_lines` wait; past that the oldest is dropped and counted, and the count
// goes out with the next batch. A line is cut to kMaxLogLineBytes (ending in "...") and bytes that
// are not UTF-8 become '?', so a line never breaks the message it travels in. Lines written while
// no job runs are not kept. Thread-safe.
#ifndef ZPIPE_WORKER_DAEMON_JOB_LOG_H_
#define ZPIPE_WORKER_DAEMON_JOB_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/log.h"

namespace zpipe::worker {

inline constexpr size_t kMaxLogLineBytes = 4096;

// The lines of one rank taken at once, oldest first (sent as worker.proto JobLogBatch).
struct JobLogBatch {
  struct Line {
    absl::Time time;   // when the worker wrote it
    std::string text;  // CleanLogLine'd, without its newline
  };
  std::string job_id;
  int pipeline_rank = 0;
  int data_rank = 0;
  std::vector<Line> lines;
  uint64_t dropped_lines = 0;  // lines of this rank dropped to stay within the bound before these
};

// `text` as valid UTF-8 of at most kMaxLogLineBytes bytes (see above).
std::string CleanLogLine(std::string_view text);

class JobLog : public LogSink {
 public:
  explicit JobLog(size_t max_lines) : max_lines_(max_lines == 0 ? 1 : max_lines) {}

  // Lines written from now on belong to rank (pipeline_rank, data_rank) of `job_id`. Lines of a
  // previous job that were not taken are discarded.
  void Begin(const std::string& job_id, int pipeline_rank, int data_rank);
  // Lines written from now on belong to no job; those waiting can still be taken.
  void End();
  // Splits `line` at newlines; each part is kept while a job runs.
  void Write(absl::Time time, std::string_view line) override;
  // The waiting lines, or nullopt when none wait (and none were dropped).
  std::optional<JobLogBatch> Take();

 private:
  const size_t max_lines_;
  absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int pipeline_rank_ ABSL_GUARDED_BY(mu_) = 0;
  int data_rank_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<JobLogBatch::Line> lines_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_LOG_H_
