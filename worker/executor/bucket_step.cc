#include "worker/executor/bucket_step.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zpipe::worker {

void StepParams(torch::optim::Optimizer& optimizer, std::vector<torch::Tensor> params) {
  // The executor builds its optimizer with one parameter group; step() walks the groups' lists,
  // so swapping that list steps exactly `params`, with the group's options and each parameter's
  // own state (keyed by the parameter, not by its position).
  std::vector<torch::Tensor>& group = optimizer.param_groups().at(0).params();
  std::swap(group, params);
  struct Restore {
    std::vector<torch::Tensor>& group;
    std::vector<torch::Tensor>& saved;
    ~Restore() { std::swap(group, saved); }
  } restore{group, params};
  optimizer.step();
}

BucketStepper::BucketStepper(torch::optim::Optimizer& optimizer, absl::Duration timeout)
    : optimizer_(optimizer), timeout_(timeout) {
  thread_ = std::thread([this] { Loop(); });
}

BucketStepper::~BucketStepper() {
  Abandon();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void BucketStepper::Submit(std::vector<torch::Tensor> params, CommHandle* reduced) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back({std::move(params), reduced});
  cv_.notify_all();
}

BucketStepper::Drained BucketStepper::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return std::exchange(result_, Drained());
}

void BucketStepper::Abandon() {
  std::unique_lock<std::mutex> lock(mu_);
  queue_.clear();
  abandon_ = true;
  cv_.notify_all();
  idle_cv_.wait(lock, [&] { return !busy_; });
  abandon_ = false;
  result_ = Drained();
}

void BucketStepper::Loop() {
  pthread_setname_np(pthread_self(), "zp-step");
  // A bucket's reduce is waited for in slices, so Abandon never waits out a stuck one.
  constexpr absl::Duration kSlice = absl::Milliseconds(20);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();

    bool reduced_ok = false;
    const absl::Time deadline = absl::Now() + timeout_;
    for (;;) {
      absl::Status s = job.reduced->Wait(std::min(kSlice, deadline - absl::Now()));
      if (job.reduced->Test()) {
        reduced_ok = s.ok();
        break;
      }
      std::lock_guard<std::mutex> check(mu_);
      if (abandon_ || stop_ || absl::Now() >= deadline) break;
    }
    absl::Status step_status;
    double seconds = 0;
    if (reduced_ok) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        StepParams(optimizer_, job.params);
      } catch (const std::exception& e) {
        step_status = absl::InternalError(absl::StrCat("optimizer step: ", e.what()));
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

    lock.lock();
    busy_ = false;
    if (!abandon_) {
      result_.seconds += seconds;
      if (!step_status.ok()) {
        if (result_.status.ok()) result_.status = step_status;
      } else if (reduced_ok) {
        for (const torch::Tensor& p : job.params) result_.stepped.insert(p.unsafeGetTensorImpl());
        ++result_.buckets;
      }
    }
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace zpipe::worker
