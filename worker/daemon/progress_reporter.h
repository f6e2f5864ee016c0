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
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  void SendQueued(std::vector<ActionRecord>& batch);

  const std::string job_id_;
  const int pipeline_rank_;
  const int data_rank_;
  const SendFn send_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ActionRecord> queue_;
  bool stop_ = false;
  std::mutex send_mu_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_PROGRESS_REPORTER_H_
