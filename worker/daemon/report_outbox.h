// ReportOutbox: a worker's reports (iteration, progress, log lines, finished, failure, profile
// result) that wait for the coordinator while it is unreachable, in the order they were made.
//
// Bounded by serialized bytes: past the bound the oldest progress or log batch is dropped first
// (the live view, the timeline and the log can lose detail; the iteration reports and the rank's
// end cannot), then the oldest report, and every drop is counted. Log lines are also bounded by
// count: past max_log_lines the oldest lines go, so what waits is the newest lines of the rank;
// lines dropped either way are added to the dropped_lines of the next log batch that waits (or is
// pushed). Not thread-safe: the daemon guards it with its write lock.
#ifndef ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_
#define ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

// The job a report is about, or null for a message that means something only now (heartbeat,
// hello, leaving), which never waits.
const std::string* ReportedJob(const zpipe::v1::WorkerMessage& message);

class ReportOutbox {
 public:
  explicit ReportOutbox(size_t capacity_bytes, size_t max_log_lines = 1000)
      : capacity_bytes_(capacity_bytes), max_log_lines_(max_log_lines) {}

  // Queues a report (ReportedJob non-null; others are ignored), dropping as described above.
  void Push(zpipe::v1::WorkerMessage message);
  // Queues `messages` ahead of everything waiting, in their order (reports written to a session
  // that ended, sent again), dropping as Push does when they do not fit.
  void Prepend(std::vector<zpipe::v1::WorkerMessage> messages);
  bool empty() const { return messages_.empty(); }
  size_t size() const { return messages_.size(); }
  size_t bytes() const { return bytes_; }
  size_t log_lines() const { return log_lines_; }
  const zpipe::v1::WorkerMessage& front() const { return messages_.front(); }
  void PopFront();
  // Keeps only the reports about `job_id` ("" keeps none); returns how many were removed.
  size_t RetainJob(const std::string& job_id);
  bool HasFinished(const std::string& job_id) const;
  bool HasFailure(const std::string& job_id) const;
  // Reports dropped for room since the last call.
  uint64_t TakeDropped();

 private:
  // `dropped`: removed for room rather than sent (its log lines count as dropped).
  void Erase(std::deque<zpipe::v1::WorkerMessage>::iterator it, bool dropped);
  // Drops waiting messages (the oldest progress or log batch first, then the oldest report) until
  // `incoming` more bytes fit.
  void DropForRoom(size_t incoming);
  // Drops the oldest log lines until at most max_log_lines_ wait.
  void TrimLogLines();
  // Adds the lines dropped so far to the first waiting log batch, if any.
  void CarryDroppedLines();

  const size_t capacity_bytes_;
  const size_t max_log_lines_;
  size_t log_lines_ = 0;
  uint64_t dropped_log_lines_ = 0;  // not yet added to a waiting batch
  std::deque<zpipe::v1::WorkerMessage> messages_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_
