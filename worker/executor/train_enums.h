// The optimizer and the precision a job trains with, as enums: parsed once from the job spec's
// names (train.optimizer, train.precision) where the worker reads its assignment
// (daemon/job_proto.h), so the executor and model code never compare strings.
//
// The names are job.proto's; the coordinator validates them too (coordinator/spec_validator.cc).
// This header has no dependency beyond abseil, so it can move to core/ when the coordinator takes
// the same enums.
#ifndef ZPIPE_WORKER_EXECUTOR_TRAIN_ENUMS_H_
#define ZPIPE_WORKER_EXECUTOR_TRAIN_ENUMS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker {

enum class Optimizer { kAdamW, kAdam, kSgd };

// "adamw", "adam", "sgd": the job spec's names, also written into checkpoints.
inline absl::string_view OptimizerName(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdamW:
      return "adamw";
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kSgd:
      return "sgd";
  }
  return "?";
}

// InvalidArgument naming `name` and the names known; an empty name is unknown too (the
// coordinator resolves the default before a job reaches a worker).
inline absl::StatusOr<Optimizer> ParseOptimizer(absl::string_view name) {
  for (Optimizer o : {Optimizer::kAdamW, Optimizer::kAdam, Optimizer::kSgd}) {
    if (name == OptimizerName(o)) return o;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name.substr(0, 64), "' (expected sgd, adam or adamw)"));
}

// kBf16: forward passes under bf16 autocast, with fp32 parameters, optimizer state and gradients.
enum class Precision { kFp32, kBf16 };

inline absl::string_view PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

// InvalidArgument naming `name` unless it is "fp32" or "bf16".
inline absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name.substr(0, 64), "' (expected fp32 or bf16)"));
}

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_TRAIN_ENUMS_H_
