// An exact solver for the shortest span of a compute plan: branch and bound over every valid
// per-rank order, with a plan the generators made as the incumbent, so that a plan's table can
// say how far it is from the best possible (`zpipe plan --optimal`, `scripts/bench schedules`).
//
// The problem: the placement, m, the cost model, the memory limit and whether backward is split
// (F, B, W) or fused (F, BW) fix the set of compute actions; a plan is one order per rank; its
// span is the simulator's (core/simulator.h: every action starts as soon as its rank is free and
// its inputs have arrived, a cross-rank edge costs T_comm, the span is the longest rank's first
// start to last end); it is valid when it runs without deadlock and every rank's running memory
// stays within the limit (core/validator.h). The solver finds the valid plan of least span over
// ALL such orders (no FIFO or other shape assumed), or, when the budget runs out first, returns
// the best plan found and a proven lower bound.
//
// The search (why it is exact):
//   - Every valid plan is reached: sort its actions by (start time, rank, position on the rank).
//     That order respects every dependency (an input ends, plus T_comm, no later than its
//     consumer starts, and strictly earlier when every F and B takes time or T_comm > 0; when
//     that does not hold the rank tie-break is dropped), and each action's start depends only on
//     the actions before it. The tree appends one action at a time, timed at once, and only
//     allows an action that starts no earlier than the one appended before it, so it visits each
//     valid plan's order (and, with the tie-break, few duplicates).
//   - Symmetry: microbatches are interchangeable (costs do not depend on them), so relabelling
//     maps a valid plan to one with the same span; the tree only starts F(0, i) after F(0, i-1).
//     The Ws of one stage run in the order of their Bs: two of them have the same duration and
//     memory and nothing waits for them, so swapping two that are both ready changes no time and
//     no memory; without the rule the tree would try every order of the deferred Ws (at p = 4,
//     m = 6 the proof takes 4.8 million nodes with it, 28 million without).
//   - Pruning: a node is cut when a lower bound on every completion reaches the incumbent. Per
//     rank that has started (first start t0 known), its remaining actions have release times
//     (each no earlier than the last appended start, its rank's free time, and its inputs'
//     earliest ends plus T_comm, propagated along the F and B chains); any completion ends no
//     earlier than the preemptive one-machine schedule of them, max_k (r_k + sum of the durations
//     released at or after r_k), so the rank's span is at least that minus t0. A rank that has
//     not started spans at least its own work. SpanLowerBound (core/span_bound.h) holds too.
//     And each started rank's relaxation from the node (core/rank_bound.h, RankRelaxation: the
//     rank alone, the others unlimited, memory included): the counts done of each of its kinds,
//     the queued microbatches ready no earlier than their earliest starts above, so its span is
//     at least the next start it can make plus the relaxation's least time to the end, minus t0.
//     Each rank's relaxation remembers its states across the whole tree, and its searches may
//     take 20 nodes per tree node on average (past that, the remembered states and its one-machine
//     bound answer); where they cut under 1 node in 32, only every 256th node asks. The memory
//     limit then cuts inside the tree, not only at the root. Each rank past stage 0's is asked
//     as a link of a chain too (core/rank_bound.h): from its state (not started: its first start
//     is at least the earliest start of an F of its first stage), its last B of that stage ends
//     no earlier than its relaxation measured to that B says, and rank 0 ends at least the
//     backward path and a W of stage 0 later. 1F1B at p = 4, m = 8, T_comm = 0.1 is proven in 8
//     thousand nodes (17 thousand with the ranks alone, 30 million without either).
//   - Neighbourhoods (OptimalOptions::neighbourhood_nodes, for the polish of core/planning.h):
//     between the two phases below, rounds that replay the best plan's first k actions and
//     search only below that node. The incumbent is relabelled first (stage 0's Fs in order,
//     each stage's Ws in the order of its Bs: same times, same memory) so that its order is
//     one the tree visits.
//   - Two phases. The plain search, cut at the incumbent, gets half the budget: it finds shorter
//     plans and, when it finishes, proves the best one optimal. When it does not, its open nodes
//     prove little (most hang near the root), so the rest goes to iterative deepening on the bound
//     (IDA*): each pass expands only the nodes whose bound is at most a threshold; a pass that
//     ends without a plan within it proves that no plan is shorter than the least bound it cut,
//     which is the next pass's threshold, and a pass that runs out proves the least bound of the
//     nodes it cut or left open. The reported bound is the best of these and SpanLowerBound;
//     `optimal` says a phase exhausted the tree (the bound then equals the span).
//
// The size the tree can finish is small (p = 2..3 with a few microbatches in well under a second);
// beyond that the result is the incumbent (or better) with a bound. Deterministic for a given
// `node_limit` when `time_limit_seconds` is 0; with a time limit, where it stops depends on the
// machine. Thread-safe (no shared state).
#ifndef ZPIPE_CORE_OPTIMAL_SCHEDULE_H_
#define ZPIPE_CORE_OPTIMAL_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/plan.h"

namespace zpipe::core {

struct OptimalOptions {
  double time_limit_seconds = 1;  // wall clock; 0 = no clock limit (then node_limit decides)
  int64_t node_limit = 0;         // tree nodes; 0 = none
  // Whether the node bound also asks each started rank's relaxation from the node's state
  // (core/rank_bound.h: RankRelaxation). Off is for tests.
  bool rank_relaxation_at_nodes = true;
  // Tree nodes for neighbourhood rounds (0 = none), on top of `node_limit`, after the plain
  // search when it did not finish (see "Two phases" above): each round keeps the best plan's
  // first k actions (in the tree's order, k drawn at random) and searches every completion of
  // them, cut at the best span, for at most kNeighbourhoodRoundNodes nodes. The local search
  // (core/schedule.h) moves a few actions at a time; a better plan that shares the best one's
  // order up to some point is found here (V-Half p = 4, m = 8, T_comm 0.1: searched 55.4,
  // rounds 55.2, where as many nodes of the tree from the root find nothing). They prove
  // nothing: the deepening after them proves as before. Deterministic.
  int64_t neighbourhood_nodes = 0;
};

// Nodes one neighbourhood round may take (OptimalOptions::neighbourhood_nodes).
inline constexpr int64_t kNeighbourhoodRoundNodes = 4000;

struct OptimalResult {
  Plan plan;            // compute actions only; the incumbent when nothing better was found
  double span = 0;      // of `plan`, with the simulator's rules
  double bound = 0;     // proven: every valid plan's span is >= bound (== span when optimal)
  bool optimal = false;  // the tree was exhausted: `plan` has the least span of any valid plan
  bool improved = false;  // `plan` is shorter than the incumbent
  double incumbent_span = 0;
  int64_t nodes = 0;      // tree nodes visited
  double seconds = 0;     // wall time spent
  // (span - bound) / span: how much shorter than `plan` any valid plan could still be.
  double gap() const { return span > 0 ? (span - bound) / span : 0; }
};

// `incumbent` is a valid compute plan (no comm, no REDUCE) of the shape: its placement,
// microbatch count and kind of backward (B and W, or BW) define the problem; `cost` has
// placement.num_stages() stages. InvalidArgument when the incumbent is lowered, mixes BW with
// B/W, or does not fit the cost model; FailedPrecondition when it is not valid under
// `memory_limit` (the solver needs a feasible start).
absl::StatusOr<OptimalResult> SolveOptimal(const Plan& incumbent, const CostModel& cost,
                                           double memory_limit, const OptimalOptions& options);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_OPTIMAL_SCHEDULE_H_
