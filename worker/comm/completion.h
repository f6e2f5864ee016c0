// Internal to worker/comm: a one-shot completion cell shared by a transport thread and the
// caller's CommHandle.
#ifndef ZPIPE_WORKER_COMM_COMPLETION_H_
#define ZPIPE_WORKER_COMM_COMPLETION_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/communicator.h"

namespace zpipe::worker::internal {

class Completion {
 public:
  // Marks the transport's start time (the first call wins).
  void MarkStarted();
  // Finishes with `status`; later calls are ignored, so a race between an error path and the
  // normal path cannot flip the result.
  void Finish(absl::Status status);

  absl::Status Wait(absl::Duration timeout);
  bool Test();
  CommTimes times() const;

 private:
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  CommTimes times_ ABSL_GUARDED_BY(mu_);
};

// A CommHandle over a shared Completion.
std::unique_ptr<CommHandle> MakeHandle(std::shared_ptr<Completion> completion);

// A handle that has already finished with `status` (argument errors, no-op collectives).
std::unique_ptr<CommHandle> FinishedHandle(absl::Status status);

}  // namespace zpipe::worker::internal

#endif  // ZPIPE_WORKER_COMM_COMPLETION_H_
