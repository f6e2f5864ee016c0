#include "worker/executor/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace zpipe::worker {

absl::StatusOr<LrSchedule> LrSchedule::Make(double lr, int warmup, const std::string& decay,
                                            double min_lr, int iterations) {
  LrSchedule s;
  s.lr = lr;
  s.warmup = std::max(0, warmup);
  s.min_lr = min_lr;
  s.iterations = std::max(1, iterations);
  if (decay.empty() || decay == "constant") {
    s.decay = Decay::kConstant;
  } else if (decay == "cosine") {
    s.decay = Decay::kCosine;
  } else if (decay == "linear") {
    s.decay = Decay::kLinear;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("train.lr_schedule.decay: unknown '", decay,
                                                   "' (expected constant, cosine or linear)"));
  }
  return s;
}

double LrSchedule::At(int t) const {
  if (t < warmup) return lr * (t + 1) / warmup;
  if (decay == Decay::kConstant) return lr;
  const int span = iterations - warmup;
  const double progress = span > 0 ? std::clamp(double(t - warmup) / span, 0.0, 1.0) : 1.0;
  const double factor =
      decay == Decay::kCosine ? 0.5 * (1 + std::cos(std::numbers::pi * progress)) : 1 - progress;
  return min_lr + (lr - min_lr) * factor;
}

}  // namespace zpipe::worker
