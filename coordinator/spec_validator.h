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

namespace zpipe::coordinator {

inline constexpr int kMaxPipeline = 64;
inline constexpr int kMaxData = 64;
inline constexpr int kMaxWorldSize = 1024;
inline constexpr int kMaxMicrobatches = 4096;
// Bounds plan size (and so plan generation time): p * v * m stage-microbatches per iteration.
inline constexpr int kMaxStageMicrobatches = 65536;

absl::Status ValidateSpecFields(const JobSpec& spec);

// Job ids: 1..64 chars of [a-z0-9._-], starting with a letter or digit. Path "job_id".
absl::Status ValidateJobId(absl::string_view id);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_SPEC_VALIDATOR_H_
