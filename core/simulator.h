// Timed simulator: runs a plan against a cost model and reports when every action ran.
//
// Rules (docs/design.md "Plan IR"): each rank runs its actions in order, one compute action at a
// time. F(s,i) waits for F(s-1,i); B(s,i) / BW(s,i) for F(s,i) and B(s+1,i) (or BW(s+1,i));
// W(s,i) for B(s,i); R(s,i) for F(s,i), and a B or BW(s,i) whose microbatch has an R waits for
// it too (its F then holds only mem_keep: CostModel::MemoryDelta). A cross-rank edge costs T_comm. In a lowered plan the cross-rank edges go
// through SEND/RECV: a send takes no rank time and its message arrives T_comm later; a receive is
// posted without blocking (the consumer waits for the arrival) unless `blocking_recv` is set, in
// which case the rank waits at the RECV itself (the strict in-order check).
//
// REDUCE actions run on a per-rank reduction stream: each starts when it is issued (the action
// before it in the rank's order has started... and ended) and the stream is free, takes
// `reduce_cost`, and never blocks compute. The iteration ends when the last compute and the last
// reduction are done. With `release_during_w` a REDUCE that follows its chunk's last W (or BW) is
// issued partway through that action instead of at its end: workers launch a bucket's all-reduce
// the moment its last parameter's gradient lands, and W produces a chunk's buckets in layout
// order (reverse layer order), so bucket k of the chunk's K (uniform) buckets is issued
// (k + 1) / K of the way through the action's W part.
//
// A plan whose ranks cannot all finish is reported as FailedPrecondition ("deadlock: ...") naming
// the blocked action of every stuck rank and what it waits for.
#ifndef ZPIPE_CORE_SIMULATOR_H_
#define ZPIPE_CORE_SIMULATOR_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/plan.h"

namespace zpipe::core {

struct SimOptions {
  double reduce_cost = 0;                // duration of each REDUCE action
  bool blocking_recv = false;            // a RECV blocks its rank until the message arrives
  bool check_dependencies_exist = true;  // fail when a dependency is missing from the plan
  // Buckets are released during the last W (the workers' per-parameter countdown with
  // grad_sync.overlap on); false = at the end of the action before the REDUCE.
  bool release_during_w = false;
  // Replay: compute action k of rank r takes (*action_durations)[r][k] instead of the cost
  // model's duration (same shape as plan.ranks; entries of non-compute actions are ignored).
  // The runtime bench feeds it the durations a run measured, so the simulated span says what
  // the run would have taken with instant hand-overs beyond T_comm.
  const std::vector<std::vector<double>>* action_durations = nullptr;
};

struct ActionTiming {
  double start = 0;
  double end = 0;
};

struct SimResult {
  std::vector<std::vector<ActionTiming>> timings;  // same shape as plan.ranks
  // The span (docs/design.md): the longest of the ranks' own spans, each from that rank's first
  // start to its last end (compute and reductions). The bubble figures are relative to it.
  double span = 0;
  // The global makespan: the first start of any rank to the last end of any rank. At least
  // `span`; longer when the ranks' busy windows are staggered (ZB-V ends its last W late).
  double global_makespan = 0;
  std::vector<double> busy;         // per rank, compute time (R included)
  double recompute_time = 0;        // all ranks, the part of busy spent in R actions
  std::vector<double> idle;         // per rank, span - busy
  std::vector<double> rank_bubble;  // per rank, 1 - busy / span
  double bubble_rate = 0;           // 1 - sum(busy) / (p * span)
  std::vector<double> peak_memory;  // per rank, max running sum of memory deltas
  // Reductions: total wall time, the part that did not overlap the rank's compute, and
  // overlap = 1 - exposed / total (1 when there is no reduction).
  std::vector<double> reduce_total;
  std::vector<double> reduce_exposed;
  double reduce_overlap = 1;
  double total_reduce = 0;
  double total_exposed_reduce = 0;
};

absl::StatusOr<SimResult> Simulate(const Plan& plan, const CostModel& cost,
                                   const SimOptions& options = {});

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_SIMULATOR_H_
