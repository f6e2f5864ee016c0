// ProgressReporter: a running rank's JobReporter (job_reporter.h) over the coordinator stream.
// Executed actions (compute, sends, receives, reductions) go out batched as ProgressBatch
// messages; iteration reports and the rank's end as IterationReport and RankFinished.
//
// OnAction() never blocks compute: it appends to a bounded queue under a short lock. A separate
// thread flushes the queue every `flush_interval` or `batch_size` events as one ProgressBatch
// through `send`. A full queue drops the event and counts it (dropped()); the count is logged
// and carried on the next flush so nothing is lost silently.
#ifndef ZPIPE_WORKER_DAEMON_PROGRESS_REPORTER_H_
#define ZPIPE_WORKER_DAEMON_PROGRESS_REPORTER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/daemon/job_reporter.h"
#include "worker/executor/executor.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

class ProgressReporter : public JobReporter {
 public:
  struct Options {
    size_t capacity = 1 << 16;
    size_t batch_size = 256;
    absl::Duration flush_interval = absl::Milliseconds(50);
  };
  // `send` writes one message to the coordinator stream; returns false when the stream is gone.
  using SendFn = std::function<bool(const zpipe::v1::WorkerMessage&)>;

  ProgressReporter(std::string job_id, int pipeline_rank, int data_rank, SendFn send,
                   Options options);
  ProgressReporter(std::string job_id, int pipeline_rank, int data_rank, SendFn send)
      : ProgressReporter(std::move(job_id), pipeline_rank, data_rank, std::move(send), Options()) {}
  // Flushes what is queued, then stops the thread.
  ~ProgressReporter() override;

  void OnAction(const ActionRecord& record) override;
  // Sends everything queued now (blocks until sent).
  void Flush() override;
  bool ReportIteration(const IterationReport& report) override;
  bool ReportFinished() override;

  uint64_t dropped() const { return dropped_.load(); }
  uint64_t sent() const { return sent_.load(); }

 private:
  void Loop();
  void SendQueued(std::vector<ActionRecord>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  // A batch is full or the reporter stops: the thread should not wait out the interval.
  bool FlushDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || queue_.size() >= options_.batch_size;
  }

  const std::string job_id_;
  const int pipeline_rank_;
  const int data_rank_;
  const SendFn send_;
  const Options options_;
  absl::Mutex mu_;
  std::vector<ActionRecord> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Held while a batch is sent, so batches go out in the order they were taken (Flush and the
  // thread both send). Never held with mu_.
  absl::Mutex send_mu_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_PROGRESS_REPORTER_H_
