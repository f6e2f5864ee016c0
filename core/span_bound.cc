#include "core/span_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace zpipe::core {
namespace {

double Busy(const Placement& placement, int m, const CostModel& cost, int r) {
  double busy = 0;
  for (int c = 0; c < placement.chunks_per_rank(); ++c) {
    const StageCost& sc = cost.stages[placement.StageOf(r, c)];
    busy += m * (sc.f + sc.b + sc.w);
  }
  return busy;
}

}  // namespace

double SpanLowerBound(const Placement& placement, int m, const CostModel& cost, double limit,
                      bool split_backward) {
  const int p = placement.num_ranks();
  const int S = placement.num_stages();
  const int v = placement.chunks_per_rank();
  const double tol = 1e-9 * std::max(1.0, std::abs(limit));
  auto comm_after = [&](int s) {  // T_comm of the edge s -> s + 1
    return placement.RankOf(s) == placement.RankOf(s + 1) ? 0.0 : cost.comm;
  };
  double bound = 0;
  for (int r = 0; r < p; ++r) {
    int s_lo = S, s_hi = -1;
    double sum_f = 0, max_f = 0, min_mf = std::numeric_limits<double>::infinity();
    double hold = std::numeric_limits<double>::infinity();  // least memory a started mb holds
    bool conserving = true;                                 // M_F + M_B + M_W = 0 on every stage
    for (int c = 0; c < v; ++c) {
      const int s = placement.StageOf(r, c);
      const StageCost& sc = cost.stages[s];
      s_lo = std::min(s_lo, s);
      s_hi = std::max(s_hi, s);
      sum_f += sc.f;
      max_f = std::max(max_f, sc.f);
      min_mf = std::min(min_mf, sc.mem_f);
      hold = std::min({hold, sc.mem_f, -sc.mem_w});
      const double leak = sc.mem_f + sc.mem_b + sc.mem_w;
      conserving = conserving && std::abs(leak) <= 1e-9 * std::max(1.0, std::abs(sc.mem_f));
    }
    // Start of F(s_lo, i) to the earliest start of B(s_hi, i).
    double chain = 0;
    for (int s = s_lo; s < S; ++s) chain += cost.stages[s].f + (s + 1 < S ? comm_after(s) : 0);
    for (int s = S - 1; s > s_hi; --s) {
      const StageCost& sc = cost.stages[s];
      chain += (split_backward ? sc.b : sc.b + sc.w) + comm_after(s - 1);
    }
    // Warm-up: only forwards, as many as memory holds.
    const double max_forwards = min_mf > 0 ? std::floor((limit + tol) / min_mf) : m * v;
    const double warm_fill = std::min(static_cast<double>(m) * sum_f, max_forwards * max_f);
    const double warm = std::max(0.0, chain - warm_fill);
    // Cool-down: the last chunk-0 forward's own forwards on this rank, plus the rest of the
    // microbatches memory lets the rank hold.
    double tail = 0;
    if (conserving && hold > 0) {
      const double first_mf = cost.stages[s_lo].mem_f;
      const double others =
          std::clamp(std::floor((limit + tol - first_mf) / hold), 0.0, static_cast<double>(m - 1));
      const double per_other = Busy(placement, 1, cost, r) - cost.stages[s_lo].f;
      tail = std::max(0.0, chain - (sum_f + others * per_other));
    }
    const bool disjoint = min_mf > 0 && m + v - 1 > max_forwards;
    const double idle = disjoint ? warm + tail : std::max(warm, tail);
    bound = std::max(bound, Busy(placement, m, cost, r) + idle);
  }
  return bound;
}

double BubbleLowerBound(const Placement& placement, int m, const CostModel& cost,
                        double span_bound) {
  if (!(span_bound > 0)) return 0;
  double busy = 0;
  for (int r = 0; r < placement.num_ranks(); ++r) busy += Busy(placement, m, cost, r);
  return 1 - busy / (placement.num_ranks() * span_bound);
}

}  // namespace zpipe::core
