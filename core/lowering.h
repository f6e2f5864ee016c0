// Comm lowering: inserts SEND / RECV actions for every cross-rank stage edge of a compute plan.
//
// A SEND goes right after the action producing the tensor (sends never block compute). On the
// receiving rank, RECVs from each peer are ordered as that peer sends them (the pairwise ordering
// rule, so NCCL's issue-order matching works), and each RECV is placed before its consumer, as
// late as that order allows. No comm is emitted between two stages on the same rank (the V
// turn-around on rank p-1 and the V end on rank 0 hand over locally).
#ifndef ZPIPE_CORE_LOWERING_H_
#define ZPIPE_CORE_LOWERING_H_

#include "absl/status/statusor.h"
#include "core/plan.h"

namespace zpipe::core {

// Fails on a plan that already has comm actions or misses a compute action an edge needs.
absl::StatusOr<Plan> LowerComm(const Plan& compute_plan);

// The compute-only plan underneath a lowered one (comm actions removed; REDUCE kept).
Plan StripComm(const Plan& plan);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_LOWERING_H_
