#include "core/internal/order_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace zpipe::core::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kUnset = -1;

// Simulated actions per second of one core of the development machine (2 cores shared by a
// few builds): the rate list-scheduler runs and evaluations of p = 4..16 plans ran at there.
constexpr double kActionsPerSecond = 4e7;

// Moves the action at `from` to position `to` of `order`, shifting the ones between.
void MoveAction(std::vector<Action>& order, int from, int to) {
  if (from < to) {
    std::rotate(order.begin() + from, order.begin() + from + 1, order.begin() + to + 1);
  } else if (to < from) {
    std::rotate(order.begin() + to, order.begin() + from, order.begin() + from + 1);
  }
}

// Proposes one move on `orders` given their timeline; returns (rank, from, to) or from == to
// when nothing applies.
struct Move {
  int rank = 0, from = 0, to = 0;
};

// A microbatch's backward chain, on every rank at once: each of its Bs moves ahead of up to `d`
// Ws right before it. Drains are paced by the slowest hop of a chain, so no single-rank move
// shortens them.
// With `defer`, the chain's Ws instead move `d` places later on every rank (so that the ranks
// pass later microbatches' Bs on sooner).
std::vector<Move> ChainMove(const Orders& orders, int mb, int d, bool defer) {
  std::vector<Move> moves;
  for (int r = 0; r < static_cast<int>(orders.size()); ++r) {
    const std::vector<Action>& order = orders[r];
    const int n = static_cast<int>(order.size());
    for (int k = n - 1; k >= 0; --k) {
      if (order[k].microbatch != mb) continue;
      if (defer) {
        if (order[k].kind != ActionKind::kBackwardWeight) continue;
        const int to = std::min(n - 1, k + d);
        if (to > k) moves.push_back({r, k, to});
        continue;
      }
      if (order[k].kind != ActionKind::kBackwardInput) continue;
      int to = k;
      while (to > 0 && k - to < d && order[to - 1].kind == ActionKind::kBackwardWeight) --to;
      if (to < k) moves.push_back({r, k, to});
    }
  }
  return moves;
}

Move Propose(const Orders& orders, const OrderTimeline& tl, SearchRng& rng) {
  const int p = static_cast<int>(orders.size());
  const int r = rng.Uniform(2) == 0 ? CriticalRank(tl) : rng.Uniform(p);
  const std::vector<Action>& order = orders[r];
  const int n = static_cast<int>(order.size());
  Move move{r, 0, 0};
  if (n < 2) return move;
  const std::vector<double>& start = tl.start[r];
  const std::vector<double>& end = tl.end[r];
  const int type = rng.Uniform(10);
  if (type < 4) {
    // Fill an idle gap: move one of the next Ws to just before the action that waited.
    std::vector<int> gaps;
    for (int k = 1; k < n; ++k) {
      if (start[k] > end[k - 1] + 1e-9 * std::max(1.0, end[k - 1])) gaps.push_back(k);
    }
    if (gaps.empty()) return move;
    const int k = gaps[rng.Uniform(static_cast<int>(gaps.size()))];
    int skip = rng.Uniform(3);
    for (int j = k + 1; j < n; ++j) {
      if (order[j].kind != ActionKind::kBackwardWeight) continue;
      if (skip-- > 0) continue;
      return {r, j, k};
    }
    return move;
  }
  if (type < 7) {
    // An F or B that its own rank held up (it started the moment the previous action ended):
    // move it a little earlier.
    for (int tries = 0; tries < 8; ++tries) {
      const int k = 1 + rng.Uniform(n - 1);
      if (order[k].kind == ActionKind::kBackwardWeight) continue;
      if (start[k] > end[k - 1] + 1e-9 * std::max(1.0, end[k - 1])) continue;
      return {r, k, std::max(0, k - 1 - rng.Uniform(3))};
    }
    return move;
  }
  const int k = rng.Uniform(n);
  const int d = 1 + rng.Uniform(4);
  return {r, k, std::clamp(rng.Uniform(2) == 0 ? k - d : k + d, 0, n - 1)};
}

}  // namespace

int CriticalRank(const OrderTimeline& tl) {
  int best = 0;
  double span = -1;
  for (size_t r = 0; r < tl.start.size(); ++r) {
    if (tl.start[r].empty()) continue;
    const double s = tl.end[r].back() - tl.start[r].front();
    if (s > span) span = s, best = static_cast<int>(r);
  }
  return best;
}

bool OrderScore::operator<(const OrderScore& o) const {
  if (span != o.span) return span < o.span;
  if (makespan != o.makespan) return makespan < o.makespan;
  return total < o.total;
}

OrderProblem::OrderProblem(const Placement& placement, int microbatches, const CostModel& cost,
                           double memory_limit)
    : p_(placement.num_ranks()),
      m_(microbatches),
      S_(placement.num_stages()),
      cost_(&cost),
      limit_(memory_limit),
      tol_(1e-9 * std::max(1.0, std::abs(memory_limit))),
      actions_(int64_t{3} * placement.num_stages() * microbatches) {
  rank_of_.resize(S_);
  edge_.assign(S_, 0);
  for (int s = 0; s < S_; ++s) rank_of_[s] = placement.RankOf(s);
  for (int s = 0; s + 1 < S_; ++s) edge_[s] = rank_of_[s] == rank_of_[s + 1] ? 0 : cost.comm;
}

std::optional<OrderScore> OrderProblem::Evaluate(const Orders& orders,
                                                 OrderTimeline* timeline) const {
  const int p = p_;
  const CostModel& cost = *cost_;
  std::vector<double> end_f(size_t(S_) * m_, kUnset), end_b(size_t(S_) * m_, kUnset);
  std::vector<size_t> cursor(p, 0);
  std::vector<double> free_at(p, 0), first(p, kInf), mem(p, 0);
  size_t left = 0;
  for (const auto& o : orders) left += o.size();
  if (timeline != nullptr) {
    timeline->start.resize(p);
    timeline->end.resize(p);
    for (int r = 0; r < p; ++r) {
      timeline->start[r].assign(orders[r].size(), 0);
      timeline->end[r].assign(orders[r].size(), 0);
    }
  }
  // Alternate sweep direction: forward sweeps carry F chains, backward sweeps carry B chains.
  for (bool forward = true; left > 0; forward = !forward) {
    size_t done = 0;
    for (int k = 0; k < p; ++k) {
      const int r = forward ? k : p - 1 - k;
      const auto& order = orders[r];
      while (cursor[r] < order.size()) {
        const Action& a = order[cursor[r]];
        const int s = a.stage;
        const size_t idx = size_t(s) * m_ + a.microbatch;
        double ready = free_at[r];
        if (a.kind == ActionKind::kForward) {
          if (s > 0) {
            const double dep = end_f[idx - m_];
            if (dep == kUnset) break;
            ready = std::max(ready, dep + edge_[s - 1]);
          }
        } else if (a.kind == ActionKind::kBackwardWeight) {
          const double dep = end_b[idx];
          if (dep == kUnset) break;
          ready = std::max(ready, dep);
        } else {  // B or BW
          const double dep = end_f[idx];
          if (dep == kUnset) break;
          ready = std::max(ready, dep);
          if (s + 1 < S_) {
            const double up = end_b[idx + m_];
            if (up == kUnset) break;
            ready = std::max(ready, up + edge_[s]);
          }
        }
        mem[r] += cost.MemoryDelta(a);
        if (mem[r] > limit_ + tol_) return std::nullopt;
        const double end = ready + cost.Duration(a);
        if (a.kind == ActionKind::kForward) end_f[idx] = end;
        if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
          end_b[idx] = end;
        }
        if (timeline != nullptr) {
          timeline->start[r][cursor[r]] = ready;
          timeline->end[r][cursor[r]] = end;
        }
        first[r] = std::min(first[r], ready);
        free_at[r] = end;
        ++cursor[r];
        ++done;
      }
    }
    if (done == 0) return std::nullopt;
    left -= done;
  }
  OrderScore score;
  double lo = kInf, hi = 0;
  for (int r = 0; r < p; ++r) {
    if (orders[r].empty()) continue;
    const double span = free_at[r] - first[r];
    score.span = std::max(score.span, span);
    score.total += span;
    lo = std::min(lo, first[r]);
    hi = std::max(hi, free_at[r]);
  }
  score.makespan = lo <= hi ? hi - lo : 0;
  return score;
}

bool OrderProblem::Recreate(const Orders& base, const OrderTimeline& timeline, double cut,
                            const RecreateWeights& weights, SearchRng& rng, Orders* out,
                            int64_t* checks) const {
  const int p = p_;
  const CostModel& cost = *cost_;
  std::vector<double> end_f(size_t(S_) * m_, kUnset), end_b(size_t(S_) * m_, kUnset);
  std::vector<double> free_at(p, 0), mem(p, 0);
  out->assign(p, {});
  // Per rank, the actions to place: one queue per (stage, kind), in their order in `base`.
  struct Queue {
    int stage;
    ActionKind kind;
    std::vector<int> microbatches;  // next at the back
  };
  std::vector<std::vector<Queue>> queues(p);
  size_t left = 0;
  for (int r = 0; r < p; ++r) {
    std::vector<Action>& order = (*out)[r];
    order.reserve(base[r].size());
    for (size_t k = 0; k < base[r].size(); ++k) {
      const Action& a = base[r][k];
      const size_t idx = size_t(a.stage) * m_ + a.microbatch;
      if (timeline.start[r][k] < cut) {
        order.push_back(a);
        mem[r] += cost.MemoryDelta(a);
        free_at[r] = timeline.end[r][k];
        if (a.kind == ActionKind::kForward) end_f[idx] = timeline.end[r][k];
        if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
          end_b[idx] = timeline.end[r][k];
        }
        continue;
      }
      auto it = std::find_if(queues[r].begin(), queues[r].end(), [&](const Queue& q) {
        return q.stage == a.stage && q.kind == a.kind;
      });
      if (it == queues[r].end()) it = queues[r].insert(queues[r].end(), {a.stage, a.kind, {}});
      it->microbatches.push_back(a.microbatch);
      ++left;
    }
    for (Queue& q : queues[r]) std::reverse(q.microbatches.begin(), q.microbatches.end());
  }
  auto weight = [&](ActionKind kind) {
    return kind == ActionKind::kForward          ? weights.f
           : kind == ActionKind::kBackwardWeight ? weights.w
                                                 : weights.b;
  };
  // Each rank's best candidate, kept until something it depends on changes: its own last action
  // (free time, memory) or an input from the neighbouring stage's rank.
  struct Best {
    Queue* queue = nullptr;
    double key = kInf, start = 0;
  };
  std::vector<Best> best(p);
  std::vector<char> dirty(p, 1);
  auto refresh = [&](int r) {
    Best b;
    for (Queue& q : queues[r]) {
      if (q.microbatches.empty()) continue;
      ++*checks;
      const int s = q.stage;
      const size_t idx = size_t(s) * m_ + q.microbatches.back();
      double ready = free_at[r];
      if (q.kind == ActionKind::kForward) {
        if (s > 0) {
          if (end_f[idx - m_] == kUnset) continue;
          ready = std::max(ready, end_f[idx - m_] + edge_[s - 1]);
        }
      } else if (q.kind == ActionKind::kBackwardWeight) {
        if (end_b[idx] == kUnset) continue;
        ready = std::max(ready, end_b[idx]);
      } else {
        if (end_f[idx] == kUnset) continue;
        ready = std::max(ready, end_f[idx]);
        if (s + 1 < S_) {
          if (end_b[idx + m_] == kUnset) continue;
          ready = std::max(ready, end_b[idx + m_] + edge_[s]);
        }
      }
      const Action a{q.kind, s, q.microbatches.back()};
      if (mem[r] + cost.MemoryDelta(a) > limit_ + tol_) continue;
      const double d = cost.Duration(a);
      const double key = ready + d * (weight(q.kind) + weights.jitter * rng.Real());
      if (key < b.key) b = {&q, key, ready};
    }
    best[r] = b;
    dirty[r] = 0;
  };
  for (; left > 0; --left) {
    int best_rank = -1;
    *checks += p / 4 + 1;  // the scan below
    for (int r = 0; r < p; ++r) {
      if (dirty[r]) refresh(r);
      if (best[r].queue != nullptr && (best_rank < 0 || best[r].key < best[best_rank].key)) {
        best_rank = r;
      }
    }
    if (best_rank < 0) return false;
    Queue* best_queue = best[best_rank].queue;
    const double best_start = best[best_rank].start;
    const Action a{best_queue->kind, best_queue->stage, best_queue->microbatches.back()};
    best_queue->microbatches.pop_back();
    const size_t idx = size_t(a.stage) * m_ + a.microbatch;
    const double end = best_start + cost.Duration(a);
    (*out)[best_rank].push_back(a);
    mem[best_rank] += cost.MemoryDelta(a);
    free_at[best_rank] = end;
    dirty[best_rank] = 1;
    if (a.kind == ActionKind::kForward) {
      end_f[idx] = end;
      if (a.stage + 1 < S_) dirty[rank_of_[a.stage + 1]] = 1;
    }
    if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
      end_b[idx] = end;
      if (a.stage > 0) dirty[rank_of_[a.stage - 1]] = 1;
    }
  }
  return true;
}

uint64_t SearchRng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int SearchRng::Uniform(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

double SearchRng::Real() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

int64_t SearchWork(double budget_seconds) {
  if (!(budget_seconds > 0)) return 0;
  return static_cast<int64_t>(std::min(budget_seconds, 1e6) * kActionsPerSecond);
}

namespace {

// One phase of ImproveOrders on `work`; returns the work it left unspent. With `history` = 1
// a move is kept when the score does not get worse; with more, also when it is no worse than
// the score `history` steps ago (late acceptance). `swap_one_in` > 0: one proposal in that many
// swaps two actions a few places apart on one rank.
int64_t Improve(const OrderProblem& problem, Orders& orders, OrderScore& score, int64_t work,
                SearchRng& rng, double span_bound, size_t history, int swap_one_in) {
  OrderTimeline tl, trial_tl;
  if (!problem.Evaluate(orders, &tl)) return work;
  const int64_t cost = std::max<int64_t>(problem.actions(), 1);
  int microbatches = 0;
  for (const auto& order : orders) {
    for (const Action& a : order) microbatches = std::max(microbatches, a.microbatch + 1);
  }
  std::vector<Move> moves;
  // Iterated local search: moves that do not make the current plan worse are kept; after
  // kRestartAfter moves without a strict gain the search restarts from the best plan with a few
  // random (feasible) moves, and gives up after kMaxRestarts restarts in a row gained nothing.
  Orders best = orders;
  OrderScore best_score = score;
  int stalled = 0, restarts = 0;
  std::vector<OrderScore> late(history, score);
  int64_t step = 0;
  auto propose = [&] {
    moves.clear();
    if (swap_one_in > 0 && rng.Uniform(swap_one_in) == 0) {
      // Swap two actions a few places apart on one rank: two moves.
      const int r =
          rng.Uniform(2) == 0 ? CriticalRank(tl) : rng.Uniform(static_cast<int>(orders.size()));
      const int n = static_cast<int>(orders[r].size());
      if (n < 3) return;
      const int i = rng.Uniform(n - 1);
      const int j = std::min(n - 1, i + 2 + rng.Uniform(6));
      moves.push_back({r, i, j});
      moves.push_back({r, j - 1, i});
      return;
    }
    if (rng.Uniform(2) == 0) {
      // Chains of the later microbatches more often: the drain is where they pace the span.
      const int back = std::min(microbatches, 1 + rng.Uniform(std::max(1, microbatches / 2)));
      moves = ChainMove(orders, microbatches - back, 1 + rng.Uniform(3), rng.Uniform(2) == 0);
    } else if (const Move mv = Propose(orders, tl, rng); mv.from != mv.to) {
      moves.push_back(mv);
    }
  };
  // Applies `moves`; keeps them when the orders still complete within memory (and, with
  // `improving`, do not score worse), else undoes them.
  auto try_moves = [&](bool improving, const OrderScore* threshold = nullptr) {
    work -= cost;
    for (const Move& mv : moves) MoveAction(orders[mv.rank], mv.from, mv.to);
    std::optional<OrderScore> s = problem.Evaluate(orders, &trial_tl);
    if (s && (!improving || *s <= score || (threshold != nullptr && *s <= *threshold))) {
      score = *s;
      std::swap(tl, trial_tl);
      return true;
    }
    for (auto it = moves.rbegin(); it != moves.rend(); ++it) {
      MoveAction(orders[it->rank], it->to, it->from);
    }
    return false;
  };
  while (work >= cost && !AtBound(best_score.span, span_bound)) {
    if (stalled >= kRestartAfter) {
      if (++restarts > kMaxRestarts) break;
      orders = best;
      score = best_score;
      problem.Evaluate(orders, &tl);
      for (int k = 0, kicks = 2 + rng.Uniform(6); k < kicks && work >= cost; ++k) {
        propose();
        if (!moves.empty()) try_moves(/*improving=*/false);
      }
      stalled = 0;
      std::fill(late.begin(), late.end(), score);
      continue;
    }
    propose();
    if (moves.empty()) {
      work -= cost / 16 + 1;  // looking for a move is not free either
      continue;
    }
    ++stalled;
    const OrderScore before = score;
    const size_t slot = static_cast<size_t>(step++ % late.size());
    if (try_moves(/*improving=*/true, &late[slot]) && score < before) stalled = 0;
    late[slot] = score;
    if (score < best_score) {
      best = orders;
      best_score = score;
      restarts = 0;
    }
  }
  orders = std::move(best);
  score = best_score;
  return std::max<int64_t>(work, 0);
}

// Ruin and recreate from the best plan on `work`: each round rebuilds everything after a random
// cut (in the plan's last 1 - kRecreateFrom, where the ranks' cool-downs interlock) with random
// weights, and keeps the result when it scores no worse. Returns the work it left unspent.
int64_t RuinAndRecreate(const OrderProblem& problem, Orders& orders, OrderScore& score,
                        int64_t work, SearchRng& rng, double span_bound) {
  OrderTimeline tl;
  if (!problem.Evaluate(orders, &tl)) return work;
  const int64_t cost = std::max<int64_t>(problem.actions(), 1);
  Orders trial;
  while (work >= 2 * cost && !AtBound(score.span, span_bound)) {
    double last = 0;
    for (const auto& end : tl.end) {
      if (!end.empty()) last = std::max(last, end.back());
    }
    const double cut = last * (kRecreateFrom + (1 - kRecreateFrom) * rng.Real());
    const OrderProblem::RecreateWeights weights{.f = 0.5 * rng.Real(),
                                                .b = 0.5 * rng.Real(),
                                                .w = 1.5 * rng.Real(),
                                                .jitter = 0.5 * rng.Real()};
    int64_t checks = 0;
    const bool built = problem.Recreate(orders, tl, cut, weights, rng, &trial, &checks);
    work -= checks + cost;
    if (!built) continue;
    OrderTimeline trial_tl;
    std::optional<OrderScore> s = problem.Evaluate(trial, &trial_tl);
    if (s && *s <= score) {
      std::swap(orders, trial);
      std::swap(tl, trial_tl);
      score = *s;
    }
  }
  return std::max<int64_t>(work, 0);
}

}  // namespace

void ImproveOrders(const OrderProblem& problem, Orders& orders, OrderScore& score, int64_t work,
                   uint64_t seed, double span_bound) {
  SearchRng rng(seed);
  // Half the work on plain iterated local search; the rest (with what the first half left)
  // first on ruin and recreate, which rebuilds the whole cool-down at once (what no sequence of
  // small moves that each keep the score reaches), then from the best plan with late acceptance
  // and swaps, which can walk out of the optimum the first half stopped in. Every phase keeps
  // its best plan, so none loses ground.
  const int64_t first = work / 2;
  const int64_t left = Improve(problem, orders, score, first, rng, span_bound, 1, 0);
  const int64_t second = work - first + left;
  const int64_t rebuild = static_cast<int64_t>(second * kRecreateShare);
  const int64_t unspent = RuinAndRecreate(problem, orders, score, rebuild, rng, span_bound);
  Improve(problem, orders, score, second - rebuild + unspent, rng, span_bound, kLateAcceptance,
          kSwapOneIn);
}

}  // namespace zpipe::core::internal
