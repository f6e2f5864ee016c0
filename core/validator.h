// Plan validation: structural checks that a plan is a correct schedule of one iteration.
//
// ValidatePlan checks, and names the first offending action in its error:
//   - every action refers to a stage / microbatch / peer in range and sits on the stage's rank;
//   - per (stage, microbatch): exactly one F and either exactly one B and one W, or one BW; at
//     most one R (recompute), on the stage's rank after its F and before its B (or BW);
//   - on a rank, F(s,i) comes before B(s,i) (or BW) and B(s,i) before W(s,i); same-rank stage
//     edges are in order (F(s-1,i) before F(s,i), B(s+1,i) before B(s,i));
//   - the plan simulates without deadlock (so cross-rank order is satisfiable);
//   - with a memory limit: every rank's running memory stays within it (a recomputed
//     microbatch's F holds mem_keep, its R adds the rest: CostModel::MemoryDelta);
//   - lowered plans: no comm within a rank; every cross-rank edge has one SEND after its producer
//     and one RECV before its consumer; and for every ordered rank pair (a, b) the k-th SEND a->b
//     and the k-th RECV on b from a carry the same (kind, stage, microbatch); the plan executes
//     without deadlock with blocking receives in order;
//   - REDUCE actions: each (chunk, bucket) at most once per rank.
#ifndef ZPIPE_CORE_VALIDATOR_H_
#define ZPIPE_CORE_VALIDATOR_H_

#include <optional>

#include "absl/status/status.h"
#include "core/cost_model.h"
#include "core/plan.h"

namespace zpipe::core {

struct ValidateOptions {
  const CostModel* cost = nullptr;     // needed for the memory check; unit costs otherwise
  std::optional<double> memory_limit;  // per rank
};

absl::Status ValidatePlan(const Plan& plan, const ValidateOptions& options = {});

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_VALIDATOR_H_
