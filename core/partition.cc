#include "core/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::core {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every stage cost is computed as prefix[j] - prefix[i] from one prefix array. Prefix sums of
// non-negative costs are non-decreasing in floating point too, so a stage's cost never exceeds
// that of a stage containing it, and the comparisons against the bottleneck (itself such a
// difference) are exact.
struct Prefix {
  std::vector<double> sum;
  double operator()(int i, int j) const { return sum[j] - sum[i]; }
};

// The smallest possible cost of the most expensive stage. best[j]: the optimum for blocks [0, j)
// in s stages. best_{s-1}[i] is non-decreasing in i and cost(i, j) non-increasing, so the
// minimum over i of max(best_{s-1}[i], cost(i, j)) sits where they cross (binary search).
double Bottleneck(const Prefix& cost, int n, int num_stages) {
  std::vector<double> prev(n + 1, kInf), cur(n + 1, kInf);
  for (int j = 1; j <= n; ++j) prev[j] = cost(0, j);
  for (int s = 2; s <= num_stages; ++s) {
    std::fill(cur.begin(), cur.end(), kInf);
    for (int j = s; j <= n; ++j) {
      int lo = s - 1, hi = j - 1;  // first i in [lo, hi] with prev[i] >= cost(i, j), else hi + 1
      while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if (prev[mid] >= cost(mid, j)) {
          hi = mid - 1;
        } else {
          lo = mid + 1;
        }
      }
      double v = kInf;
      for (int i : {lo - 1, lo}) {
        if (i >= s - 1 && i <= j - 1) v = std::min(v, std::max(prev[i], cost(i, j)));
      }
      cur[j] = v;
    }
    std::swap(prev, cur);
  }
  return prev[n];
}

}  // namespace

absl::StatusOr<std::vector<int>> BalancedCuts(const std::vector<BlockCost>& blocks,
                                              int num_stages) {
  const int n = static_cast<int>(blocks.size());
  if (num_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("balanced cuts: stages must be >= 1, got ", num_stages));
  }
  if (n < num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("balanced cuts: the model has ", n, " blocks, fewer than the ", num_stages,
                     " pipeline stages; use fewer stages or more blocks"));
  }
  Prefix cost{std::vector<double>(n + 1, 0)};
  for (int k = 0; k < n; ++k) {
    const BlockCost& b = blocks[k];
    for (double v : {b.f_ms, b.b_ms, b.w_ms}) {
      if (!std::isfinite(v) || v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("balanced cuts: block ", k, " has a negative or non-finite cost (f ",
                         b.f_ms, ", b ", b.b_ms, ", w ", b.w_ms, " ms)"));
      }
    }
    cost.sum[k + 1] = cost.sum[k] + b.total_ms();
  }
  if (!std::isfinite(cost.sum[n])) {
    return absl::InvalidArgumentError("balanced cuts: the total cost overflows");
  }
  std::vector<int> cuts;
  if (num_stages == 1) return cuts;
  if (cost.sum[n] == 0) {  // nothing measured: as even as possible by block count
    const int base = n / num_stages, extra = n % num_stages;
    for (int s = 1; s < num_stages; ++s) cuts.push_back(s * base + std::min(s, extra));
    return cuts;
  }
  const double bottleneck = Bottleneck(cost, n, num_stages);

  // Tie-break. g[i]: the smallest sum of squared stage costs for blocks [i, n) in s stages, each
  // at most `bottleneck`; next[s][i]: the smallest stage end reaching it. Built from the right so
  // that following `next` from block 0 takes the lexicographically smallest cuts among the optimal.
  std::vector<double> g(n + 1, kInf), h(n + 1, kInf);
  std::vector<std::vector<int>> next(num_stages + 1, std::vector<int>(n + 1, -1));
  for (int i = 0; i < n; ++i) {
    if (cost(i, n) <= bottleneck) {
      g[i] = cost(i, n) * cost(i, n);
      next[1][i] = n;
    }
  }
  for (int s = 2; s <= num_stages; ++s) {
    std::fill(h.begin(), h.end(), kInf);
    // Stage [i, c) with c <= n - (s - 1), so the s - 1 later stages keep a block each; i leaves
    // the num_stages - s earlier stages a block each (and only i = 0 starts the first stage).
    const int last_i = s == num_stages ? 0 : n - s;
    for (int i = num_stages - s; i <= last_i; ++i) {
      for (int c = i + 1; c <= n - (s - 1) && cost(i, c) <= bottleneck; ++c) {
        if (g[c] == kInf) continue;
        const double v = cost(i, c) * cost(i, c) + g[c];
        if (v < h[i]) {
          h[i] = v;
          next[s][i] = c;
        }
      }
    }
    std::swap(g, h);
  }
  int at = 0;
  for (int s = num_stages; s > 1; --s) {
    at = next[s][at];
    cuts.push_back(at);
  }
  return cuts;
}

std::vector<BlockCost> StageCosts(const std::vector<BlockCost>& blocks,
                                  const std::vector<int>& cuts) {
  std::vector<BlockCost> stages;
  const int n = static_cast<int>(blocks.size());
  int begin = 0;
  for (size_t s = 0; s <= cuts.size(); ++s) {
    const int end = s < cuts.size() ? cuts[s] : n;
    BlockCost c;
    for (int k = begin; k < end; ++k) {
      c.f_ms += blocks[k].f_ms;
      c.b_ms += blocks[k].b_ms;
      c.w_ms += blocks[k].w_ms;
      c.param_bytes += blocks[k].param_bytes;
    }
    if (end > begin) c.activation_bytes = blocks[end - 1].activation_bytes;
    stages.push_back(c);
    begin = end;
  }
  return stages;
}

namespace {

// (busiest rank, busiest stage, sum of squared stages) of `cuts`: smaller is better.
struct RankObjective {
  double rank_max = 0, stage_max = 0, squares = 0;
  bool operator<(const RankObjective& o) const {
    constexpr double kEps = 1e-9;
    if (std::abs(rank_max - o.rank_max) > kEps * std::max(1.0, o.rank_max)) {
      return rank_max < o.rank_max;
    }
    if (std::abs(stage_max - o.stage_max) > kEps * std::max(1.0, o.stage_max)) {
      return stage_max < o.stage_max;
    }
    return squares < o.squares - kEps * std::max(1.0, o.squares);
  }
};

RankObjective Evaluate(const Prefix& cost, int n, const std::vector<int>& cuts,
                       const std::vector<int>& rank_of_stage, int ranks) {
  RankObjective o;
  std::vector<double> load(ranks, 0);
  const int stages = static_cast<int>(cuts.size()) + 1;
  for (int s = 0; s < stages; ++s) {
    const double c = cost(s == 0 ? 0 : cuts[s - 1], s + 1 < stages ? cuts[s] : n);
    load[rank_of_stage[s]] += c;
    o.stage_max = std::max(o.stage_max, c);
    o.squares += c * c;
  }
  for (double l : load) o.rank_max = std::max(o.rank_max, l);
  return o;
}

}  // namespace

absl::StatusOr<std::vector<int>> RankBalancedCuts(const std::vector<BlockCost>& blocks,
                                                  const std::vector<int>& rank_of_stage) {
  const int num_stages = static_cast<int>(rank_of_stage.size());
  absl::StatusOr<std::vector<int>> balanced = BalancedCuts(blocks, num_stages);
  if (!balanced.ok() || num_stages <= 1) return balanced;
  int ranks = 0;
  for (int r : rank_of_stage) {
    if (r < 0) return absl::InvalidArgumentError("balanced cuts: a stage has a negative rank");
    ranks = std::max(ranks, r + 1);
  }
  if (ranks == num_stages) return balanced;  // one stage per rank: the stage optimum is it
  const int n = static_cast<int>(blocks.size());
  Prefix cost{std::vector<double>(n + 1, 0)};
  for (int k = 0; k < n; ++k) cost.sum[k + 1] = cost.sum[k] + blocks[k].total_ms();
  if (cost.sum[n] == 0) return balanced;

  std::vector<int> even;
  const int base = n / num_stages, extra = n % num_stages;
  for (int s = 1; s < num_stages; ++s) even.push_back(s * base + std::min(s, extra));

  std::vector<int> best;
  RankObjective best_value;
  for (std::vector<int> cuts : {*balanced, even}) {
    RankObjective value = Evaluate(cost, n, cuts, rank_of_stage, ranks);
    // Steepest descent over single-cut moves of any distance within its neighbours.
    while (true) {
      std::vector<int> move_best = cuts;
      RankObjective move_value = value;
      for (int k = 0; k + 1 < num_stages; ++k) {
        const int lo = k == 0 ? 1 : cuts[k - 1] + 1;
        const int hi = k + 2 < num_stages ? cuts[k + 1] - 1 : n - 1;
        for (int c = lo; c <= hi; ++c) {
          if (c == cuts[k]) continue;
          std::vector<int> candidate = cuts;
          candidate[k] = c;
          const RankObjective v = Evaluate(cost, n, candidate, rank_of_stage, ranks);
          if (v < move_value) {
            move_value = v;
            move_best = std::move(candidate);
          }
        }
      }
      if (!(move_value < value)) break;
      cuts = std::move(move_best);
      value = move_value;
    }
    if (best.empty() || value < best_value) {
      best = cuts;
      best_value = value;
    }
  }
  return best;
}

}  // namespace zpipe::core
