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
    absl::MutexLock lock(&mu_);
    stop_ = true;  // wakes Loop (its Await)
  }
  thread_.join();
}

void BucketStepper::Submit(std::vector<torch::Tensor> params, CommHandle* reduced) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({std::move(params), reduced});  // wakes Loop (its Await)
}

BucketStepper::Drained BucketStepper::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &BucketStepper::Idle));
  return std::exchange(result_, Drained());
}

void BucketStepper::Abandon() {
  absl::MutexLock lock(&mu_);
  queue_.clear();
  abandon_ = true;  // the thread's AwaitReduced sees it within a slice
  mu_.Await(absl::Condition(this, &BucketStepper::NotBusy));
  abandon_ = false;
  result_ = Drained();
}

bool BucketStepper::AwaitReduced(const Job& job) {
  // A bucket's reduce is waited for in slices, so Abandon never waits out a stuck one.
  constexpr absl::Duration kSlice = absl::Milliseconds(20);
  const absl::Time deadline = absl::Now() + timeout_;
  for (;;) {
    absl::Status s = job.reduced->Wait(std::min(kSlice, deadline - absl::Now()));
    if (job.reduced->Test()) return s.ok();
    absl::MutexLock check(&mu_);
    if (abandon_ || stop_ || absl::Now() >= deadline) return false;
  }
}

void BucketStepper::Loop() {
  pthread_setname_np(pthread_self(), "zp-step");
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BucketStepper::HasWorkOrStop));
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }

    const bool reduced_ok = AwaitReduced(job);
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

    absl::MutexLock lock(&mu_);
    busy_ = false;  // wakes Drain and Abandon (their Await)
    if (!abandon_) {
      result_.seconds += seconds;
      if (!step_status.ok()) {
        if (result_.status.ok()) result_.status = step_status;
      } else if (reduced_ok) {
        for (const torch::Tensor& p : job.params) result_.stepped.insert(p.unsafeGetTensorImpl());
        ++result_.buckets;
      }
    }
  }
}

}  // namespace zpipe::worker
