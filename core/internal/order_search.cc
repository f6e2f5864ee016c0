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
// A timing from part of the way (OrderProblem::EvaluateFrom) copies what starts earlier at about
// an eighth of the cost of simulating an action (1 against 10 ns on the development machine, at
// p = 4, m = 16 and p = 8, m = 32), so each kept action counts as that share of one.
constexpr int64_t kKeptActionsPerSimulated = 8;

// The work of one EvaluateFrom over a plan of `actions` actions that simulated `simulated`.
int64_t TimingWork(int64_t simulated, int64_t actions) {
  return simulated + (actions - simulated) / kKeptActionsPerSimulated;
}

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

// The end times of the Fs and of the Bs (or BWs) placed so far, per (stage, microbatch), and the
// rules core::Simulate starts an action by.
class EndTimes {
 public:
  // `edge` (the latency of stage s -> s + 1) must outlive this.
  EndTimes(int stages, int microbatches, const std::vector<double>& edge)
      : S_(stages),
        m_(microbatches),
        edge_(edge),
        f_(size_t(stages) * microbatches, kUnset),
        b_(size_t(stages) * microbatches, kUnset) {}

  // When `kind` of (stage s, microbatch i) may start on a rank free from `free_at`; nullopt while
  // one of its inputs is not placed.
  std::optional<double> Ready(ActionKind kind, int s, int i, double free_at) const {
    const size_t idx = size_t(s) * m_ + i;
    double ready = free_at;
    if (kind == ActionKind::kForward) {
      if (s > 0) {
        const double dep = f_[idx - m_];
        if (dep == kUnset) return std::nullopt;
        ready = std::max(ready, dep + edge_[s - 1]);
      }
    } else if (kind == ActionKind::kBackwardWeight) {
      const double dep = b_[idx];
      if (dep == kUnset) return std::nullopt;
      ready = std::max(ready, dep);
    } else {  // B or BW
      const double dep = f_[idx];
      if (dep == kUnset) return std::nullopt;
      ready = std::max(ready, dep);
      if (s + 1 < S_) {
        const double up = b_[idx + m_];
        if (up == kUnset) return std::nullopt;
        ready = std::max(ready, up + edge_[s]);
      }
    }
    return ready;
  }

  // Records that `a` ended at `end` (Ws need not be recorded).
  void Record(const Action& a, double end) {
    const size_t idx = size_t(a.stage) * m_ + a.microbatch;
    if (a.kind == ActionKind::kForward) f_[idx] = end;
    if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) b_[idx] = end;
  }
  // Takes `a` out again: as if it were not placed yet.
  void Forget(const Action& a) { Record(a, kUnset); }

  // The ends as another timing left them (its Keep), and the ends here handed over.
  void Load(const OrderTimeline& from) {
    f_ = from.f_end;
    b_ = from.b_end;
  }
  void Keep(OrderTimeline* into) {
    std::swap(into->f_end, f_);
    std::swap(into->b_end, b_);
  }

 private:
  int S_, m_;
  const std::vector<double>& edge_;
  std::vector<double> f_, b_;
};

// Sizes `timeline` to the shape of the first p ranks of `orders`, leaving what it holds.
void SizeTimeline(int p, const Orders& orders, OrderTimeline* timeline) {
  timeline->start.resize(p);
  timeline->end.resize(p);
  timeline->mem.resize(p);
  for (int r = 0; r < p; ++r) {
    timeline->start[r].resize(orders[r].size());
    timeline->end[r].resize(orders[r].size());
    timeline->mem[r].resize(orders[r].size());
  }
}

// Sizes `timeline` to the shape of the first p ranks of `orders`, all zeros.
void ResetTimeline(int p, const Orders& orders, OrderTimeline* timeline) {
  SizeTimeline(p, orders, timeline);
  for (int r = 0; r < p; ++r) {
    std::fill(timeline->start[r].begin(), timeline->start[r].end(), 0);
    std::fill(timeline->end[r].begin(), timeline->end[r].end(), 0);
    std::fill(timeline->mem[r].begin(), timeline->mem[r].end(), 0);
  }
}

// The score of the first p ranks of `orders`, which started at `first` and ended at `last`.
OrderScore ScoreOf(int p, const Orders& orders, const std::vector<double>& first,
                   const std::vector<double>& last) {
  OrderScore score;
  double lo = kInf, hi = 0;
  for (int r = 0; r < p; ++r) {
    if (orders[r].empty()) continue;
    const double span = last[r] - first[r];
    score.span = std::max(score.span, span);
    score.total += span;
    lo = std::min(lo, first[r]);
    hi = std::max(hi, last[r]);
  }
  score.makespan = lo <= hi ? hi - lo : 0;
  return score;
}

// One OrderProblem::Recreate: the actions of `base` before the cut kept, the rest in queues, then
// placed one at a time, each the best candidate among every rank's best.
class Recreation {
 public:
  Recreation(int p, const CostModel& cost, double limit, double tol,
             const std::vector<int>& rank_of, EndTimes ends,
             const OrderProblem::RecreateWeights& weights, SearchRng& rng, int64_t* checks)
      : p_(p),
        cost_(cost),
        limit_(limit),
        tol_(tol),
        rank_of_(rank_of),
        weights_(weights),
        rng_(rng),
        checks_(checks),
        ends_(std::move(ends)),
        free_at_(p, 0),
        mem_(p, 0),
        queues_(p),
        best_(p),
        dirty_(p, 1) {}

  // Copies into `out` every action of `base` that starts before `cut` in `timeline` and queues
  // the rest; returns how many were queued.
  size_t KeepBeforeCut(const Orders& base, const OrderTimeline& timeline, double cut, Orders* out) {
    size_t left = 0;
    for (int r = 0; r < p_; ++r) {
      std::vector<Action>& order = (*out)[r];
      order.reserve(base[r].size());
      for (size_t k = 0; k < base[r].size(); ++k) {
        const Action& a = base[r][k];
        if (timeline.start[r][k] < cut) {
          order.push_back(a);
          mem_[r] += cost_.MemoryDelta(a);
          free_at_[r] = timeline.end[r][k];
          ends_.Record(a, timeline.end[r][k]);
          continue;
        }
        auto it = std::find_if(queues_[r].begin(), queues_[r].end(), [&](const Queue& q) {
          return q.stage == a.stage && q.kind == a.kind;
        });
        if (it == queues_[r].end()) it = queues_[r].insert(queues_[r].end(), {a.stage, a.kind, {}});
        it->microbatches.push_back(a.microbatch);
        ++left;
      }
      for (Queue& q : queues_[r]) std::reverse(q.microbatches.begin(), q.microbatches.end());
    }
    return left;
  }

  // Places the `left` queued actions into `out`; false when none fits (the rest would deadlock).
  bool PlaceRest(size_t left, Orders* out) {
    for (; left > 0; --left) {
      const int r = BestRank();
      if (r < 0) return false;
      Place(r, out);
    }
    return true;
  }

 private:
  // Per rank, the actions to place: one queue per (stage, kind), in their order in `base`.
  struct Queue {
    int stage;
    ActionKind kind;
    std::vector<int> microbatches;  // next at the back
  };
  // Each rank's best candidate, kept until something it depends on changes: its own last action
  // (free time, memory) or an input from the neighbouring stage's rank.
  struct Best {
    Queue* queue = nullptr;
    double key = kInf, start = 0;
  };

  double Weight(ActionKind kind) const {
    return kind == ActionKind::kForward          ? weights_.f
           : kind == ActionKind::kBackwardWeight ? weights_.w
                                                 : weights_.b;
  }

  void Refresh(int r) {
    Best b;
    for (Queue& q : queues_[r]) {
      if (q.microbatches.empty()) continue;
      ++*checks_;
      const std::optional<double> ready =
          ends_.Ready(q.kind, q.stage, q.microbatches.back(), free_at_[r]);
      if (!ready) continue;
      const Action a{q.kind, q.stage, q.microbatches.back()};
      if (mem_[r] + cost_.MemoryDelta(a) > limit_ + tol_) continue;
      const double d = cost_.Duration(a);
      const double key = *ready + d * (Weight(q.kind) + weights_.jitter * rng_.Real());
      if (key < b.key) b = {&q, key, *ready};
    }
    best_[r] = b;
    dirty_[r] = 0;
  }

  // The rank whose best candidate has the lowest key; -1 when no rank has one.
  int BestRank() {
    int best_rank = -1;
    *checks_ += p_ / 4 + 1;  // the scan below
    for (int r = 0; r < p_; ++r) {
      if (dirty_[r]) Refresh(r);
      if (best_[r].queue != nullptr && (best_rank < 0 || best_[r].key < best_[best_rank].key)) {
        best_rank = r;
      }
    }
    return best_rank;
  }

  // Appends rank r's best candidate to its order and marks the ranks it may unblock.
  void Place(int r, Orders* out) {
    Queue* queue = best_[r].queue;
    const Action a{queue->kind, queue->stage, queue->microbatches.back()};
    queue->microbatches.pop_back();
    const double end = best_[r].start + cost_.Duration(a);
    (*out)[r].push_back(a);
    mem_[r] += cost_.MemoryDelta(a);
    free_at_[r] = end;
    dirty_[r] = 1;
    ends_.Record(a, end);
    if (a.kind == ActionKind::kForward && a.stage + 1 < int(rank_of_.size())) {
      dirty_[rank_of_[a.stage + 1]] = 1;
    }
    if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) &&
        a.stage > 0) {
      dirty_[rank_of_[a.stage - 1]] = 1;
    }
  }

  const int p_;
  const CostModel& cost_;
  const double limit_, tol_;
  const std::vector<int>& rank_of_;
  const OrderProblem::RecreateWeights& weights_;
  SearchRng& rng_;
  int64_t* checks_;
  EndTimes ends_;
  std::vector<double> free_at_, mem_;  // per rank
  std::vector<std::vector<Queue>> queues_;
  std::vector<Best> best_;
  std::vector<char> dirty_;
};
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
  return Time(orders, nullptr, 0, timeline, nullptr);
}

std::optional<OrderScore> OrderProblem::EvaluateFrom(const Orders& orders,
                                                     const OrderTimeline& base, double from,
                                                     OrderTimeline* timeline,
                                                     int64_t* simulated) const {
  return Time(orders, &base, from, timeline, simulated);
}

std::optional<OrderScore> OrderProblem::Time(const Orders& orders, const OrderTimeline* base,
                                             double from, OrderTimeline* timeline,
                                             int64_t* simulated) const {
  const int p = p_;
  const CostModel& cost = *cost_;
  EndTimes ends(S_, m_, edge_);
  std::vector<size_t> cursor(p, 0);
  std::vector<double> free_at(p, 0), first(p, kInf), mem(p, 0);
  size_t left = 0;
  for (const auto& o : orders) left += o.size();
  if (base == nullptr) {
    if (timeline != nullptr) ResetTimeline(p, orders, timeline);
  } else {
    // What starts before `from` keeps its time: each rank's order up to there, as `base` ran it
    // (starts never fall along a rank's order), with the ends, memory and times `base` left.
    ends.Load(*base);
    SizeTimeline(p, orders, timeline);
    for (int r = 0; r < p; ++r) {
      const auto& order = orders[r];
      const std::vector<double>& starts = base->start[r];
      const size_t k = std::lower_bound(starts.begin(), starts.end(), from) - starts.begin();
      for (size_t j = k; j < order.size(); ++j) ends.Forget(order[j]);
      std::copy_n(base->start[r].begin(), k, timeline->start[r].begin());
      std::copy_n(base->end[r].begin(), k, timeline->end[r].begin());
      std::copy_n(base->mem[r].begin(), k, timeline->mem[r].begin());
      if (k > 0) {
        first[r] = base->start[r][0];
        free_at[r] = base->end[r][k - 1];
        mem[r] = base->mem[r][k - 1];
      }
      cursor[r] = k;
      left -= k;
    }
  }
  if (simulated != nullptr) *simulated += static_cast<int64_t>(left);
  // Alternate sweep direction: forward sweeps carry F chains, backward sweeps carry B chains.
  for (bool forward = true; left > 0; forward = !forward) {
    size_t done = 0;
    for (int k = 0; k < p; ++k) {
      const int r = forward ? k : p - 1 - k;
      const auto& order = orders[r];
      while (cursor[r] < order.size()) {
        const Action& a = order[cursor[r]];
        const std::optional<double> ready = ends.Ready(a.kind, a.stage, a.microbatch, free_at[r]);
        if (!ready) break;
        mem[r] += cost.MemoryDelta(a);
        if (mem[r] > limit_ + tol_) return std::nullopt;
        const double end = *ready + cost.Duration(a);
        ends.Record(a, end);
        if (timeline != nullptr) {
          timeline->start[r][cursor[r]] = *ready;
          timeline->end[r][cursor[r]] = end;
          timeline->mem[r][cursor[r]] = mem[r];
        }
        first[r] = std::min(first[r], *ready);
        free_at[r] = end;
        ++cursor[r];
        ++done;
      }
    }
    if (done == 0) return std::nullopt;
    left -= done;
  }
  if (timeline != nullptr) ends.Keep(timeline);
  return ScoreOf(p, orders, first, free_at);
}

bool OrderProblem::Recreate(const Orders& base, const OrderTimeline& timeline, double cut,
                            const RecreateWeights& weights, SearchRng& rng, Orders* out,
                            int64_t* checks) const {
  out->assign(p_, {});
  Recreation recreation(p_, *cost_, limit_, tol_, rank_of_, EndTimes(S_, m_, edge_), weights, rng,
                        checks);
  const size_t left = recreation.KeepBeforeCut(base, timeline, cut, out);
  return recreation.PlaceRest(left, out);
}

void OrderProblem::CriticalArcs(const Orders& orders, const OrderTimeline& tl,
                                std::vector<std::pair<int, int>>* arcs) const {
  // Where each F and each B (or BW) sits in its rank's order.
  std::vector<int> f_at(size_t(S_) * m_, -1), b_at(size_t(S_) * m_, -1);
  for (int r = 0; r < p_; ++r) {
    for (int k = 0; k < static_cast<int>(orders[r].size()); ++k) {
      const Action& a = orders[r][k];
      const size_t idx = size_t(a.stage) * m_ + a.microbatch;
      if (a.kind == ActionKind::kForward) f_at[idx] = k;
      if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) {
        b_at[idx] = k;
      }
    }
  }
  const int critical = CriticalRank(tl);
  if (orders[critical].empty()) return;
  const double from = tl.start[critical].front();
  auto tight = [](double start, double end) {
    return start <= end + 1e-9 * std::max(1.0, std::abs(end));
  };
  int r = critical;
  int k = static_cast<int>(orders[r].size()) - 1;
  while (k >= 0 && tl.start[r][k] > from) {
    const double start = tl.start[r][k];
    if (k > 0 && tight(start, tl.end[r][k - 1])) {
      arcs->emplace_back(r, k);
      --k;
      continue;
    }
    // An input set the start: step to the action that produced it.
    const Action& a = orders[r][k];
    int next_r = -1, next_k = -1;
    auto consider = [&](int stage, const std::vector<int>& at, double edge) {
      if (next_r >= 0 || stage < 0 || stage >= S_) return;
      const int rank = rank_of_[stage];
      const int pos = at[size_t(stage) * m_ + a.microbatch];
      if (pos >= 0 && tight(start, tl.end[rank][pos] + edge)) next_r = rank, next_k = pos;
    };
    if (a.kind == ActionKind::kForward) {
      if (a.stage > 0) consider(a.stage - 1, f_at, edge_[a.stage - 1]);
    } else if (a.kind == ActionKind::kBackwardWeight) {
      consider(a.stage, b_at, 0);
    } else {
      if (a.stage + 1 < S_) consider(a.stage + 1, b_at, edge_[a.stage]);
      consider(a.stage, f_at, 0);
    }
    if (next_r < 0) return;
    r = next_r;
    k = next_k;
  }
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

// The moves of one Improve phase on `orders`: proposed from their timeline, then kept or undone.
// Each try charges one evaluation to `work`.
class MoveSearch {
 public:
  MoveSearch(const OrderProblem& problem, Orders& orders, OrderScore& score, int64_t& work,
             SearchRng& rng, int swap_one_in)
      : problem_(problem),
        orders_(orders),
        score_(score),
        work_(work),
        rng_(rng),
        swap_one_in_(swap_one_in),
        cost_(std::max<int64_t>(problem.actions(), 1)) {
    for (const auto& order : orders) {
      for (const Action& a : order) microbatches_ = std::max(microbatches_, a.microbatch + 1);
    }
  }

  // The work one try costs.
  int64_t cost() const { return cost_; }

  // Times `orders` afresh; false when they do not complete within memory.
  bool Retime() {
    arcs_fresh_ = false;
    return problem_.Evaluate(orders_, &tl_).has_value();
  }

  // Proposes the next moves; HasMoves() is false when nothing applies.
  void ProposeMoves() {
    moves_.clear();
    if (swap_one_in_ > 0 && rng_.Uniform(swap_one_in_) == 0) {
      ProposeSwap();
      return;
    }
    if (rng_.Uniform(kCriticalOneIn) == 0) {
      ProposeCritical();
      return;
    }
    if (rng_.Uniform(2) == 0) {
      // Chains of the later microbatches more often: the drain is where they pace the span.
      const int back = std::min(microbatches_, 1 + rng_.Uniform(std::max(1, microbatches_ / 2)));
      moves_ = ChainMove(orders_, microbatches_ - back, 1 + rng_.Uniform(3), rng_.Uniform(2) == 0);
    } else if (const Move mv = Propose(orders_, tl_, rng_); mv.from != mv.to) {
      moves_.push_back(mv);
    }
  }
  bool HasMoves() const { return !moves_.empty(); }

  // Applies the proposed moves; keeps them when the orders still complete within memory (and,
  // with `improving`, score no worse than before or than `threshold`), else undoes them.
  bool TryMoves(bool improving, const OrderScore* threshold = nullptr) {
    // Only what starts from the earliest place a move touched on is timed anew.
    double from = kInf;
    for (const Move& mv : moves_) {
      from = std::min(from, tl_.start[mv.rank][std::min(mv.from, mv.to)]);
      MoveAction(orders_[mv.rank], mv.from, mv.to);
    }
    int64_t simulated = 0;
    std::optional<OrderScore> s =
        problem_.EvaluateFrom(orders_, tl_, from, &trial_tl_, &simulated);
    work_ -= TimingWork(simulated, cost_);
    if (s && (!improving || *s <= score_ || (threshold != nullptr && *s <= *threshold))) {
      score_ = *s;
      std::swap(tl_, trial_tl_);
      arcs_fresh_ = false;
      return true;
    }
    for (auto it = moves_.rbegin(); it != moves_.rend(); ++it) {
      MoveAction(orders_[it->rank], it->to, it->from);
    }
    return false;
  }

  // A restart from the plan now in `orders`: a few random feasible moves, whatever they score.
  void Kick() {
    Retime();
    for (int k = 0, kicks = 2 + rng_.Uniform(6); k < kicks && work_ >= cost_; ++k) {
      ProposeMoves();
      if (!moves_.empty()) TryMoves(/*improving=*/false);
    }
  }

 private:
  // A step of the critical path between two actions on one rank (CriticalArcs): the later one
  // moves ahead of the earlier, or the earlier one behind the later, by one to three places;
  // half the time at either end of a run of such steps on a rank, where the path enters or
  // leaves the rank.
  void ProposeCritical() {
    if (!arcs_fresh_) {
      arcs_.clear();
      problem_.CriticalArcs(orders_, tl_, &arcs_);
      ends_.clear();
      for (size_t j = 0; j < arcs_.size(); ++j) {
        const bool first = j == 0 || arcs_[j - 1].first != arcs_[j].first ||
                           arcs_[j - 1].second != arcs_[j].second + 1;
        const bool last = j + 1 == arcs_.size() || arcs_[j + 1].first != arcs_[j].first ||
                          arcs_[j + 1].second != arcs_[j].second - 1;
        if (first || last) ends_.push_back(arcs_[j]);
      }
      arcs_fresh_ = true;
      work_ -= cost_;
    }
    if (arcs_.empty()) return;
    const auto& pick = rng_.Uniform(2) == 0 && !ends_.empty()
                           ? ends_[rng_.Uniform(static_cast<int>(ends_.size()))]
                           : arcs_[rng_.Uniform(static_cast<int>(arcs_.size()))];
    const auto [r, k] = pick;
    const int n = static_cast<int>(orders_[r].size());
    const int d = rng_.Uniform(3);
    if (rng_.Uniform(2) == 0) {
      moves_.push_back({r, k, std::max(0, k - 1 - d)});
    } else {
      moves_.push_back({r, k - 1, std::min(n - 1, k + d)});
    }
  }

  // Swap two actions a few places apart on one rank: two moves.
  void ProposeSwap() {
    const int r =
        rng_.Uniform(2) == 0 ? CriticalRank(tl_) : rng_.Uniform(static_cast<int>(orders_.size()));
    const int n = static_cast<int>(orders_[r].size());
    if (n < 3) return;
    const int i = rng_.Uniform(n - 1);
    const int j = std::min(n - 1, i + 2 + rng_.Uniform(6));
    moves_.push_back({r, i, j});
    moves_.push_back({r, j - 1, i});
  }

  const OrderProblem& problem_;
  Orders& orders_;
  OrderScore& score_;  // of `orders_`
  int64_t& work_;
  SearchRng& rng_;
  const int swap_one_in_;
  const int64_t cost_;
  int microbatches_ = 0;
  OrderTimeline tl_, trial_tl_;  // of `orders_`, and of the last try
  std::vector<Move> moves_;
  std::vector<std::pair<int, int>> arcs_, ends_;  // the critical path of tl_ (CriticalArcs)
  bool arcs_fresh_ = false;
};

// One phase of ImproveOrders on `work`; returns the work it left unspent. With `history` = 1
// a move is kept when the score does not get worse; with more, also when it is no worse than
// the score `history` steps ago (late acceptance). `swap_one_in` > 0: one proposal in that many
// swaps two actions a few places apart on one rank.
int64_t Improve(const OrderProblem& problem, Orders& orders, OrderScore& score, int64_t work,
                SearchRng& rng, double span_bound, size_t history, int swap_one_in) {
  MoveSearch search(problem, orders, score, work, rng, swap_one_in);
  if (!search.Retime()) return work;
  const int64_t cost = search.cost();
  // Iterated local search: moves that do not make the current plan worse are kept; after
  // kRestartAfter moves without a strict gain the search restarts from the best plan with a few
  // random (feasible) moves, and gives up after kMaxRestarts restarts in a row gained nothing.
  Orders best = orders;
  OrderScore best_score = score;
  int stalled = 0, restarts = 0;
  std::vector<OrderScore> late(history, score);
  int64_t step = 0;
  while (work >= cost && !AtBound(best_score.span, span_bound)) {
    if (stalled >= kRestartAfter) {
      if (++restarts > kMaxRestarts) break;
      orders = best;
      score = best_score;
      search.Kick();
      stalled = 0;
      std::fill(late.begin(), late.end(), score);
      continue;
    }
    search.ProposeMoves();
    if (!search.HasMoves()) {
      work -= cost / 16 + 1;  // looking for a move is not free either
      continue;
    }
    ++stalled;
    const OrderScore before = score;
    const size_t slot = static_cast<size_t>(step++ % late.size());
    if (search.TryMoves(/*improving=*/true, &late[slot]) && score < before) stalled = 0;
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
  OrderTimeline trial_tl;
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
    work -= checks;
    if (!built) {
      work -= cost;
      continue;
    }
    // What starts before the cut was kept as it ran.
    int64_t simulated = 0;
    std::optional<OrderScore> s = problem.EvaluateFrom(trial, tl, cut, &trial_tl, &simulated);
    work -= TimingWork(simulated, cost);
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
  // Half the work on plain iterated local search; the rest (with what the first half left) in
  // rounds, each first on ruin and recreate, which rebuilds the whole cool-down at once (what no
  // sequence of small moves that each keep the score reaches), then from the best plan with late
  // acceptance and swaps, which can walk out of the optimum the first half stopped in. Every
  // phase keeps its best plan, so none loses ground.
  const int64_t first = work / 2;
  int64_t left = work - first + Improve(problem, orders, score, first, rng, span_bound, 1, 0);
  for (int round = 0; round < kRecreateRounds; ++round) {
    const int64_t share = left / (kRecreateRounds - round);
    const int64_t rebuild = static_cast<int64_t>(share * kRecreateShare);
    const int64_t unspent = RuinAndRecreate(problem, orders, score, rebuild, rng, span_bound);
    left -= share;
    left += Improve(problem, orders, score, share - rebuild + unspent, rng, span_bound,
                    kLateAcceptance, kSwapOneIn);
  }
}

}  // namespace zpipe::core::internal
