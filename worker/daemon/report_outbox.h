// ReportOutbox: a worker's reports (iteration, progress, finished, failure, profile result) that
// wait for the coordinator while it is unreachable, in the order they were made.
//
// Bounded by serialized bytes: past the bound the oldest progress batch is dropped first (the
// live view and the timeline can lose detail; the iteration reports and the rank's end cannot),
// then the oldest report, and every drop is counted. Not thread-safe: the daemon guards it with
// its write lock.
#ifndef ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_
#define ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

// The job a report is about, or null for a message that means something only now (heartbeat,
// hello, leaving), which never waits.
const std::string* ReportedJob(const zpipe::v1::WorkerMessage& message);

class ReportOutbox {
 public:
  explicit ReportOutbox(size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Queues a report (ReportedJob non-null; others are ignored), dropping as described above.
  void Push(zpipe::v1::WorkerMessage message);
  bool empty() const { return messages_.empty(); }
  size_t size() const { return messages_.size(); }
  size_t bytes() const { return bytes_; }
  const zpipe::v1::WorkerMessage& front() const { return messages_.front(); }
  void PopFront();
  // Keeps only the reports about `job_id` ("" keeps none); returns how many were removed.
  size_t RetainJob(const std::string& job_id);
  bool HasFinished(const std::string& job_id) const;
  // Reports dropped for room since the last call.
  uint64_t TakeDropped();

 private:
  void Erase(std::deque<zpipe::v1::WorkerMessage>::iterator it);

  const size_t capacity_bytes_;
  std::deque<zpipe::v1::WorkerMessage> messages_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_REPORT_OUTBOX_H_
