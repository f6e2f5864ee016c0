// A lower bound on the span of any plan of a shape under a memory limit, so that a plan's table
// can say how much any schedule search could still gain.
//
// Per rank r (stages on r: lowest s_lo, highest s_hi) the bound is busy_r plus the idle time no
// order can avoid:
//   - warm-up: the rank's first action is some F(s_lo, i) at t0; its first B cannot start before
//     t0 + L_r, L_r = sum_{s >= s_lo} T_F(s) + sum_{s > s_hi} T_B(s) + T_comm per cross-rank edge
//     on that path (down to the last stage and back up to s_hi). Until then only forwards can
//     run, and memory holds at most floor(limit / M_F) of them.
//   - cool-down: the rank's last F(s_lo, j) also waits L_r for its B(s_hi, j); in that window the
//     rank can only work on the microbatches it still holds, and each of those holds at least
//     min(M_F, -M_W) of memory (needs M_F + M_B + M_W = 0, else this part is 0).
// The two windows are disjoint when memory cannot hold every chunk-0 forward before the first
// backward (m + v - 1 forwards), and then their idle times add; otherwise the larger counts.
// The span is at least max_r of that. For fused backwards (1F1B, GPipe, ...) T_B is T_B + T_W.
#ifndef ZPIPE_CORE_SPAN_BOUND_H_
#define ZPIPE_CORE_SPAN_BOUND_H_

#include "core/cost_model.h"
#include "core/placement.h"

namespace zpipe::core {

// `cost` has placement.num_stages() stages; `memory_limit` is per rank.
double SpanLowerBound(const Placement& placement, int microbatches, const CostModel& cost,
                      double memory_limit, bool split_backward);

// The bubble rate a plan would have at span `span_bound` with the same busy times:
// 1 - sum_r busy_r / (p * span_bound). A plan's bubble minus this is what a search could gain.
double BubbleLowerBound(const Placement& placement, int microbatches, const CostModel& cost,
                        double span_bound);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_SPAN_BOUND_H_
