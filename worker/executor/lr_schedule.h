// LrSchedule: the learning rate of each iteration (job spec train.lr_schedule).
//
// For iteration t = 0..T-1 (T = iterations): lr * (t+1) / warmup while t < warmup; then
//   constant: lr
//   cosine:   min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * (t - warmup) / (T - warmup)))
//   linear:   min_lr + (lr - min_lr) * (1 - (t - warmup) / (T - warmup))
// The same formulas as docs/reference.md and job.proto, so a reference loop can reproduce them.
#ifndef ZPIPE_WORKER_EXECUTOR_LR_SCHEDULE_H_
#define ZPIPE_WORKER_EXECUTOR_LR_SCHEDULE_H_

#include <string>

#include "absl/status/statusor.h"

namespace zpipe::worker {

struct LrSchedule {
  enum class Decay { kConstant, kCosine, kLinear };

  double lr = 3e-4;
  int warmup = 0;
  Decay decay = Decay::kConstant;
  double min_lr = 0;
  int iterations = 1;  // T

  // `decay`: "", "constant", "cosine" or "linear"; InvalidArgument naming it otherwise.
  static absl::StatusOr<LrSchedule> Make(double lr, int warmup, const std::string& decay,
                                         double min_lr, int iterations);

  double At(int iteration) const;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_LR_SCHEDULE_H_
