// BucketStepper: the optimizer step, bucket by bucket, as each bucket's all-reduce completes.
//
// With data parallelism the executor would otherwise step every parameter after the iteration's
// last reduction: on a 2-core machine an AdamW step of 4M floats took 11-42 ms there, on the
// critical path, and the replicas' steps differed by up to 19 ms, which the next iteration began
// with as drift (docs/design.md "Gradient sync"). A bucket whose all-reduce has completed holds
// its final, averaged gradients, and once its chunk's last compute action of the iteration has
// ended nothing reads its parameters again before the next iteration; so its parameters can be
// stepped then, on this class's thread, while the rank computes the rest of the iteration.
//
// The update is the optimizer's own step() over just those parameters (the optimizer's parameter
// group is swapped for them), so every parameter gets exactly the arithmetic, state and options
// of a whole-model step: training is bit-identical either way. Global-norm clipping needs every
// gradient first, so the executor uses this only without clipping.
//
// Thread-safety: Submit, Drain and Abandon are called from the executor's thread; the optimizer
// must not be used elsewhere between a Submit and the Drain or Abandon that follows it.
#ifndef ZPIPE_WORKER_EXECUTOR_BUCKET_STEP_H_
#define ZPIPE_WORKER_EXECUTOR_BUCKET_STEP_H_

#include <torch/torch.h>

#include <deque>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace zpipe::worker {

// optimizer.step() over `params` only (each must be one of the optimizer's parameters, with its
// gradient final). Throws what the optimizer throws.
void StepParams(torch::optim::Optimizer& optimizer, std::vector<torch::Tensor> params);

class BucketStepper {
 public:
  // `timeout`: the longest wait for one all-reduce (a failed or stuck one is left to the caller's
  // own wait, which reports it; its parameters are then not stepped here).
  BucketStepper(torch::optim::Optimizer& optimizer, absl::Duration timeout);
  ~BucketStepper();  // abandons what is queued

  // Steps `params` once `reduced` completes OK. `reduced` must stay valid until the Drain or
  // Abandon that follows. Buckets are stepped in submission order.
  void Submit(std::vector<torch::Tensor> params, CommHandle* reduced);

  struct Drained {
    absl::Status status;  // the first step that threw (INTERNAL), else OK
    std::unordered_set<const c10::TensorImpl*> stepped;  // the parameters stepped
    int buckets = 0;                                     // the buckets stepped
    double seconds = 0;                                  // time spent stepping on the thread
  };
  // Waits until every submitted bucket is stepped or skipped (its reduce failed or timed out),
  // and returns what happened since the last Drain.
  Drained Drain();

  // Drops what is queued, waits for a step in progress, and forgets the results (for an
  // iteration that ends in error: the handles are about to go).
  void Abandon();

 private:
  struct Job {
    std::vector<torch::Tensor> params;
    CommHandle* reduced = nullptr;
  };
  void Loop();
  // Waits for `job`'s reduce, in slices, until it completes, Abandon or the destructor, or the
  // timeout; true when it completed OK.
  bool AwaitReduced(const Job& job) ABSL_LOCKS_EXCLUDED(mu_);

  // What the thread waits for (Loop), and what Drain and Abandon wait for.
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }
  bool NotBusy() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; }

  torch::optim::Optimizer& optimizer_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;     // the thread holds a job
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;  // the job in progress should stop waiting
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Drained result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_BUCKET_STEP_H_
