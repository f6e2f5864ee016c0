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
//     min(M_F, -M_W) of memory, or M_F with a fused BW, which frees it all at once (needs
//     M_F + M_B + M_W = 0, else this part is 0).
// The two windows are disjoint when memory cannot hold every chunk-0 forward before the first
// backward (m + v - 1 forwards), and then their idle times add; otherwise the larger counts.
// The span is at least max_r of that, and of the rank's memory-time bound:
//   - memory-time (steady state): let held(t) be rank r's running memory after the last action
//     it started by time t; held(t) <= limit from its first start t0 to its last action's start
//     T = end_r - (that action's duration, at least min T_W, or min T_B + T_W when fused: every
//     B is followed by its W on the rank, so the last action is a W or BW). When every stage
//     conserves or leaks memory (M_F + M_B + M_W >= 0) and holds M_F >= 0 after F and
//     M_F + M_B >= 0 after B, the integral of held over [t0, T] is at least
//     sum over (s, i) of M_F(s) * (B start - F start) + (M_F + M_B)(s) * (W start - B start),
//     with B start - F start >= D_s (T_F(s) + the forwards to the last stage and the backwards
//     back to s + 1, T_comm per cross-rank edge both ways) and W start - B start >= T_B(s).
//     So span_r >= min T_W + m * sum_s (M_F D_s + (M_F + M_B) T_B) / limit: Little's law for
//     the microbatches memory lets the rank hold, which charges the round trip's communication
//     to every microbatch (the warm-up and cool-down arguments only charge it once).
//   - bottleneck (a slower later rank): for any rank q whose lowest stage b is above rank r's
//     lowest stage a, every F(u, i) on q starts no earlier than F(a, i), so no earlier than
//     t0 + head, head = sum_{a <= x < b} (T_F(x) + T_comm of the edge x -> x+1); q's last B is on
//     its lowest stage b (its higher stage's B of the same microbatch comes first), and after it
//     the backward chain reaches stage a and then W(a): tail = sum_{a <= x < b} (T_B(x) + T_comm)
//     + T_W(a). In between q runs all m of its Fs and Bs (its Ws may wait), so
//     span_r >= head + m * sum_{u on q} (T_F(u) + T_B(u)) + tail: a heavy stage (an LM head)
//     sets the pace of every rank before it.
// For fused backwards (1F1B, GPipe, ...) T_B is T_B + T_W (and the B-to-W term is 0, the bottleneck
// tail has no T_W).
#ifndef ZPIPE_CORE_SPAN_BOUND_H_
#define ZPIPE_CORE_SPAN_BOUND_H_

#include "core/cost_model.h"
#include "core/placement.h"

namespace zpipe::core {

// `cost` has placement.num_stages() stages; `memory_limit` is per rank.
double SpanLowerBound(const Placement& placement, int microbatches, const CostModel& cost,
                      double memory_limit, bool split_backward);

// A lower bound on the global makespan (the first start anywhere to the last end anywhere) of
// any plan of the shape, whatever its memory limit: rank r cannot start before the first
// microbatch's forwards reach its lowest stage s, sum_{x < s} (T_F(x) + T_comm per cross-rank
// edge) after the first start, and then runs all its work, m * sum_{u on r} (T_F + T_B + T_W),
// one action at a time. The maximum over ranks. A search whose best plan is at this bound and at
// SpanLowerBound cannot find a better one (the ZB generators stop there).
double MakespanLowerBound(const Placement& placement, int microbatches, const CostModel& cost);

// The bubble rate a plan would have at span `span_bound` with the same busy times:
// 1 - sum_r busy_r / (p * span_bound). A plan's bubble minus this is what a search could gain.
double BubbleLowerBound(const Placement& placement, int microbatches, const CostModel& cost,
                        double span_bound);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_SPAN_BOUND_H_
