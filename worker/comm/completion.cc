#include "worker/comm/completion.h"

#include <utility>

namespace zpipe::worker::internal {

void Completion::MarkStarted() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  times_.start = std::chrono::steady_clock::now();
}

void Completion::Finish(absl::Status status) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  if (done_) return;
  if (!started_) {
    started_ = true;
    times_.start = now;
  }
  times_.end = now;
  status_ = std::move(status);
  done_ = true;
}

absl::Status Completion::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
    return absl::DeadlineExceededError("communication: operation still pending after the wait");
  }
  return status_;
}

bool Completion::Test() {
  absl::MutexLock lock(&mu_);
  return done_;
}

CommTimes Completion::times() const {
  absl::MutexLock lock(&mu_);
  return times_;
}

namespace {

class CompletionHandle final : public CommHandle {
 public:
  explicit CompletionHandle(std::shared_ptr<Completion> c) : c_(std::move(c)) {}
  absl::Status Wait(absl::Duration timeout) override { return c_->Wait(timeout); }
  bool Test() override { return c_->Test(); }
  CommTimes times() const override { return c_->times(); }

 private:
  std::shared_ptr<Completion> c_;
};

}  // namespace

std::unique_ptr<CommHandle> MakeHandle(std::shared_ptr<Completion> completion) {
  return std::make_unique<CompletionHandle>(std::move(completion));
}

std::unique_ptr<CommHandle> FinishedHandle(absl::Status status) {
  auto c = std::make_shared<Completion>();
  c->Finish(std::move(status));
  return MakeHandle(std::move(c));
}

}  // namespace zpipe::worker::internal
