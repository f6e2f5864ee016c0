// Cost model: per-stage compute times and memory deltas, one cross-rank comm latency.
//
// Times are in any consistent unit (the CLI and tests use microseconds). Memory deltas are what a
// rank's running activation memory changes by when the action runs: F adds mem_f, B adds mem_b,
// W adds mem_w, BW adds mem_b + mem_w. Normally mem_b + mem_w == -mem_f.
//
// Recomputation (an R action for (stage, microbatch) in the plan): that microbatch's F keeps only
// mem_keep (its input, and what it sent on), and R, which takes T_R, adds the rest,
// mem_f - mem_keep, back before the backward; B and W then release it as usual.
#ifndef ZPIPE_CORE_COST_MODEL_H_
#define ZPIPE_CORE_COST_MODEL_H_

#include <vector>

#include "absl/status/status.h"
#include "core/plan.h"

namespace zpipe::core {

struct StageCost {
  double f = 1;  // T_F
  double b = 1;  // T_B
  double w = 1;  // T_W; T_BW = T_B + T_W
  double mem_f = 1;
  double mem_b = 0;
  double mem_w = -1;
  double r = -1;         // T_R, the recomputed forward; < 0 = T_F
  double mem_keep = 0;   // what F holds when the microbatch is recomputed (R adds the rest)

  double RecomputeTime() const { return r < 0 ? f : r; }
};

struct CostModel {
  std::vector<StageCost> stages;  // one per model stage (S = p * v)
  double comm = 0;                // T_comm, charged on every cross-rank edge

  // Every stage gets `cost`.
  static CostModel Uniform(int num_stages, const StageCost& cost, double comm = 0);

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Duration and memory delta of a compute action; 0 for comm and REDUCE actions.
  double Duration(const Action& a) const;
  // `recomputed`: the plan has an R for the action's (stage, microbatch), so its F holds mem_keep.
  double MemoryDelta(const Action& a, bool recomputed = false) const;
  // Sum over stages of f + b + w: the compute of one microbatch through the whole model.
  double TotalPerMicrobatch() const;

  // OK when there are `num_stages` stages with non-negative times.
  absl::Status Check(int num_stages) const;
};

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_COST_MODEL_H_
