// CheckpointWriter: runs a job rank's checkpoint writes on a background thread, one at a time,
// so that training goes on while a checkpoint is written.
//
// The rank copies its state to host memory at an iteration boundary and hands the writer a task
// that writes that copy (JobCheckpointer does both). There is never more than one write in
// flight: Start first waits for the previous one and hands back its result, so a rank that
// checkpoints faster than its disk can take is slowed down (and the wait is measured) instead of
// piling up copies of its state in memory.
//
// Results are delivered exactly once: by Poll (when the write has finished), by the next Start,
// or by Wait. Not thread-safe: one thread (the one driving the executor) calls all methods; the
// task runs on another thread and must not touch anything that thread changes.
#ifndef ZPIPE_WORKER_DAEMON_CHECKPOINT_WRITER_H_
#define ZPIPE_WORKER_DAEMON_CHECKPOINT_WRITER_H_

#include <functional>
#include <future>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zpipe::worker {

class CheckpointWriter {
 public:
  using Task = std::function<absl::Status()>;

  CheckpointWriter() = default;
  // Waits for the write in flight; its result is dropped (call Wait first to see it).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The result of the previous write (OK when there was none) and how long Start waited for it.
  struct Started {
    absl::Status previous;
    absl::Duration waited;
  };
  // Waits for the write in flight, if any, then runs `task` on a background thread. When no
  // thread can be started, runs `task` here (the result is still delivered later, as usual).
  Started Start(Task task);

  // The result of the write in flight once it has finished; nullopt while it runs or when none
  // is in flight. Never blocks.
  std::optional<absl::Status> Poll();

  // Waits for the write in flight; its result (OK when none is in flight).
  absl::Status Wait();

  bool busy() const { return inflight_.valid(); }

 private:
  std::future<absl::Status> inflight_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_CHECKPOINT_WRITER_H_
