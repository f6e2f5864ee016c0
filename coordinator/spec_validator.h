// Spec validation: every JobSpec field checked before a job is accepted.
//
// Errors are InvalidArgument with the message "<field path>: <reason>", e.g.
// "spec.parallel.pipeline: must be in [1, 64], got 0", so clients can point at the field.
// Constraints that only the schedule generator knows (m vs p, memory limit) are checked by
// PlanJob() in planner.h, which reports them the same way.
#ifndef ZPIPE_COORDINATOR_SPEC_VALIDATOR_H_
#define ZPIPE_COORDINATOR_SPEC_VALIDATOR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/domain.h"
#include "core/plan_limits.h"

namespace zpipe::coordinator {

// The plan bounds are core's (core/plan_limits.h), the same for `zpipe plan`.
inline constexpr int kMaxPipeline = core::kMaxPipeline;
inline constexpr int kMaxData = 64;
inline constexpr int kMaxWorldSize = 1024;
inline constexpr int kMaxMicrobatches = core::kMaxMicrobatches;
// Bounds plan size (and so plan generation time): p * v * m stage-microbatches per iteration.
inline constexpr int kMaxStageMicrobatches = core::kMaxStageMicrobatches;

absl::Status ValidateSpecFields(const JobSpec& spec);

// Job ids: 1..64 chars of [a-z0-9._-], starting with a letter or digit. Path "job_id".
absl::Status ValidateJobId(absl::string_view id);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_SPEC_VALIDATOR_H_
