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

// The memory-time bound of rank r (see the header): each (stage, microbatch) holds mem_f from
// its F's start to its B's start (at least D_s later) and mem_f + mem_b from there to its W's start
// (at least T_B later); the rank never holds more than `limit`, and everything it holds lies
// between its first start and its last action's start. 0 when a stage's held amounts can be
// negative (the area argument needs them >= 0) or the limit is not positive.
double MemoryTimeBound(const Placement& placement, int m, const CostModel& cost, double limit,
                       bool split_backward, int r) {
  if (!(limit > 0)) return 0;
  const int S = placement.num_stages();
  auto comm_after = [&](int s) {
    return placement.RankOf(s) == placement.RankOf(s + 1) ? 0.0 : cost.comm;
  };
  double area = 0;  // per microbatch
  double last = std::numeric_limits<double>::infinity();  // the shortest possible last action
  for (int c = 0; c < placement.chunks_per_rank(); ++c) {
    const int s = placement.StageOf(r, c);
    const StageCost& sc = cost.stages[s];
    const double held_b = sc.mem_f + sc.mem_b;
    const double leak = held_b + sc.mem_w;
    if (sc.mem_f < 0 || leak < 0 || (split_backward && held_b < 0)) return 0;
    // F(s, i) start to B(s, i) start: its forwards to the last stage and the backwards back.
    double d = 0;
    for (int u = s; u < S; ++u) d += cost.stages[u].f + (u + 1 < S ? comm_after(u) : 0);
    for (int u = S - 1; u > s; --u) {
      d += (split_backward ? cost.stages[u].b : cost.stages[u].b + cost.stages[u].w) +
           comm_after(u - 1);
    }
    area += sc.mem_f * d + (split_backward ? held_b * sc.b : 0);
    last = std::min(last, split_backward ? sc.w : sc.b + sc.w);
  }
  return last + m * area / limit;
}

// The bottleneck bound of rank r (see the header): every F and B (BW) of a later rank q runs
// between rank r's first start plus the forward chain to q and rank r's end minus the backward
// chain back (and the last W).
double BottleneckBound(const Placement& placement, int m, const CostModel& cost,
                       bool split_backward, int r) {
  const int p = placement.num_ranks();
  auto comm_after = [&](int s) {
    return placement.RankOf(s) == placement.RankOf(s + 1) ? 0.0 : cost.comm;
  };
  auto lowest = [&](int rank) {
    int lo = placement.num_stages();
    for (int c = 0; c < placement.chunks_per_rank(); ++c) {
      lo = std::min(lo, placement.StageOf(rank, c));
    }
    return lo;
  };
  const int a = lowest(r);
  double bound = 0;
  for (int q = 0; q < p; ++q) {
    const int b = lowest(q);
    if (b <= a) continue;
    double head = 0, tail = split_backward ? cost.stages[a].w : 0, work = 0;
    for (int x = a; x < b; ++x) {
      const StageCost& sc = cost.stages[x];
      head += sc.f + comm_after(x);
      tail += (split_backward ? sc.b : sc.b + sc.w) + comm_after(x);
    }
    for (int c = 0; c < placement.chunks_per_rank(); ++c) {
      const StageCost& sc = cost.stages[placement.StageOf(q, c)];
      work += sc.f + sc.b + (split_backward ? 0 : sc.w);
    }
    bound = std::max(bound, head + m * work + tail);
  }
  return bound;
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
      // A started microbatch holds M_F until its B, then -M_W until its W; a fused BW frees
      // everything at once, so it holds M_F throughout.
      hold = std::min({hold, sc.mem_f, split_backward ? -sc.mem_w : sc.mem_f});
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
    bound = std::max(bound, MemoryTimeBound(placement, m, cost, limit, split_backward, r));
    bound = std::max(bound, BottleneckBound(placement, m, cost, split_backward, r));
  }
  return bound;
}

double MakespanLowerBound(const Placement& placement, int m, const CostModel& cost) {
  const int p = placement.num_ranks();
  std::vector<double> head(p, -1), work(p, 0);  // head: when the rank's lowest stage can start
  double reach = 0;  // when the first forward can start on stage s, after the first start
  for (int s = 0; s < placement.num_stages(); ++s) {
    const int r = placement.RankOf(s);
    const StageCost& c = cost.stages[s];
    if (head[r] < 0) head[r] = reach;
    work[r] += m * (c.f + c.b + c.w);
    const bool cross = s + 1 < placement.num_stages() && placement.RankOf(s + 1) != r;
    reach += c.f + (cross ? cost.comm : 0);
  }
  double bound = 0;
  for (int r = 0; r < p; ++r) bound = std::max(bound, std::max(head[r], 0.0) + work[r]);
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
