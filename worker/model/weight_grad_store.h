// WeightGradStore: the deferred weight-gradient work of one pipeline stage, keyed by microbatch.
//
// B(s,i) opens microbatch i (Open), and the split-linear backward pushes one closure per linear
// layer (Push); each closure captures what it needs (layer input, output gradient) and
// accumulates into its parameters' .grad in place, and names those parameters (indices into the
// stage's params()), so W can report each gradient the moment it lands (gradient sync launches a
// bucket's all-reduce then, partway through W). W(s,i) takes exactly microbatch i's work (Take)
// and runs it in push order, which is backward order: later layers first. The store belongs to
// one stage, so its errors name that stage.
//
// Thread-safety: all methods may be called concurrently (the autograd engine may run a backward,
// and so Push, on one of its own threads).
#ifndef ZPIPE_WORKER_MODEL_WEIGHT_GRAD_STORE_H_
#define ZPIPE_WORKER_MODEL_WEIGHT_GRAD_STORE_H_

#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace zpipe::worker::model {

class WeightGradStore {
 public:
  using Closure = std::function<void()>;
  struct Work {
    Closure run;
    std::vector<int> params;  // accumulated into once each by `run`
  };

  explicit WeightGradStore(int stage) : stage_(stage) {}
  WeightGradStore(const WeightGradStore&) = delete;
  WeightGradStore& operator=(const WeightGradStore&) = delete;

  int stage() const { return stage_; }

  // Starts collecting microbatch `mb`'s closures. FailedPrecondition if `mb` is already open
  // (B twice without W in between).
  absl::Status Open(int mb);
  // Appends a closure to open microbatch `mb`; `params` are the stage's parameters it
  // accumulates into, once each. FailedPrecondition if `mb` is not open (a backward ran outside
  // B).
  absl::Status Push(int mb, Closure closure, std::vector<int> params = {});
  // Removes and returns microbatch `mb`'s work, in push order. FailedPrecondition naming the
  // stage and microbatch if `mb` is not open (W without B, or W twice).
  absl::StatusOr<std::vector<Work>> Take(int mb);
  // Forgets microbatch `mb` (no-op if absent); for aborted iterations.
  void Drop(int mb);
  // Forgets everything.
  void Clear();

  bool Contains(int mb) const;
  int pending_microbatches() const;
  int pending_closures() const;

 private:
  const int stage_;
  mutable absl::Mutex mu_;
  std::map<int, std::vector<Work>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_WEIGHT_GRAD_STORE_H_
