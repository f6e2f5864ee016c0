// ZB-H1, ZB-H2 and the ZB automatic scheduler of "Zero Bubble Pipeline Parallelism" (Qi et al.
// 2024), on the linear placement (stage s on rank s).
//
// All three come out of one list scheduler. The ranks are simulated together in time order; a rank
// that falls idle picks its next action -- its next F, its next B, or one of its deferred Ws -- by
// a small policy, and never lets its running memory exceed the limit. The handcrafted schedules
// are policies with a cap on the activations in flight (F done, B not yet) per rank: ZB-H1 keeps
// 1F1B's p - r, ZB-H2 allows 2(p - r) - 1; both defer Ws into the bubbles. The automatic
// scheduler is bounded by memory alone.
//
// Each generator tries a family of policies (F/B priority, how far the warm-up may delay the first
// B, which idle gaps a W may fill, in-flight caps), times every candidate as core::Simulate does
// (each action as soon as its dependencies and its rank allow, in the chosen order), and keeps the
// one with the shortest span in docs/design.md's sense: the longest per-rank span from first start
// to last end. A short local search then polishes the winner along its critical path (beyond the
// paper, which hands this step to an ILP). The greedy pass runs the whole family on small
// problems and a short list of the usual winners as p * m grows, so that p = 32, m = 256 takes
// about 20 ms. With a search budget (SearchOptions) the automatic scheduler then runs the rest of
// the family, seeded random policies (including W lags: later ranks holding Ws back), longer
// polishing and core/internal/order_search's local moves.
//
// The memory limit is always honoured. Under a limit below what the H1 / H2 shapes need, ZB-H1
// and ZB-H2 still return the best plan that fits; only a limit below one microbatch at a time is
// an error (FailedPrecondition naming memory_limit).
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/internal/generators.h"
#include "core/internal/order_search.h"
#include "core/span_bound.h"
#include "core/status_field.h"

namespace zpipe::core::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kNoCap = std::numeric_limits<int>::max();

struct Problem {
  int p = 1;
  int m = 1;
  const CostModel* cost = nullptr;
  double limit = 0;
  double tol = 0;  // the validator's slack on the memory limit

  bool Fits(double mem) const { return mem <= limit + tol; }
  int Index(int stage, int mb) const { return stage * m + mb; }
};

// How a candidate performs. `span` is docs/design.md's span (the longest per-rank span, as the ZB
// paper measures it); `global_span` (last end anywhere - first start anywhere) breaks ties.
struct Score {
  double span = kInf;
  double global_span = kInf;

  bool operator<(const Score& o) const {
    constexpr double kRel = 1e-12;
    if (span < o.span * (1 - kRel)) return true;
    if (o.span < span * (1 - kRel)) return false;
    return global_span < o.global_span * (1 - kRel);
  }
};

// Start and end of every action of a candidate, indexed like the orders.
using Timeline = OrderTimeline;

// Times `orders` with the simulator's rules (OrderProblem, on the linear placement); nullopt when
// the orders deadlock or, with `check_memory`, when a rank's running memory exceeds the limit.
// Fills `timeline` if given.
std::optional<Score> Evaluate(const Problem& pr, const Orders& orders, bool check_memory = false,
                              Timeline* timeline = nullptr) {
  const OrderProblem problem(Placement::Linear(pr.p), pr.m, *pr.cost,
                             check_memory ? pr.limit : kInf);
  const std::optional<OrderScore> score = problem.Evaluate(orders, timeline);
  if (!score) return std::nullopt;
  return Score{score->span, score->makespan};
}

// Walks the critical path back from the end of the critical rank and returns the positions (r, k)
// where action k of rank r was held up by action k - 1 of its own rank rather than by its inputs:
// swapping those two may shorten the path.
std::vector<std::pair<int, int>> HeldUpPairs(const Problem& pr, const Orders& orders,
                                             const Timeline& tl, size_t limit) {
  const int p = pr.p;
  // Where each F and B sits in its rank's order, to follow cross-rank dependencies.
  std::vector<int> pos_f(p * pr.m, -1), pos_b(p * pr.m, -1);
  for (int r = 0; r < p; ++r) {
    for (size_t k = 0; k < orders[r].size(); ++k) {
      const Action& a = orders[r][k];
      if (a.kind == ActionKind::kForward) pos_f[pr.Index(a.stage, a.microbatch)] = k;
      if (a.kind == ActionKind::kBackwardInput) pos_b[pr.Index(a.stage, a.microbatch)] = k;
    }
  }
  const double comm = pr.cost->comm;
  std::vector<std::pair<int, int>> out;
  int r = CriticalRank(tl);
  int k = static_cast<int>(orders[r].size()) - 1;
  while (k >= 0 && out.size() < limit) {
    const Action& a = orders[r][k];
    const double start = tl.start[r][k];
    const double eps = 1e-9 * std::max(1.0, start);
    // The cross-rank input that binds, if any.
    int dep_rank = -1, dep_pos = -1;
    double dep_ready = -kInf;
    if (a.kind == ActionKind::kForward && a.stage > 0) {
      dep_rank = r - 1;
      dep_pos = pos_f[pr.Index(a.stage - 1, a.microbatch)];
      dep_ready = tl.end[dep_rank][dep_pos] + comm;
    } else if (a.kind == ActionKind::kBackwardInput && a.stage + 1 < p) {
      dep_rank = r + 1;
      dep_pos = pos_b[pr.Index(a.stage + 1, a.microbatch)];
      dep_ready = tl.end[dep_rank][dep_pos] + comm;
    }
    if (dep_rank >= 0 && dep_ready >= start - eps) {
      r = dep_rank;
      k = dep_pos;
      continue;
    }
    if (k == 0) break;
    const Action& prev = orders[r][k - 1];
    const bool own_input = prev.microbatch == a.microbatch;  // F -> B or B -> W of one microbatch
    if (prev.kind != a.kind && !own_input) out.push_back({r, k});
    --k;
  }
  return out;
}

// Moves B(r, j) on every rank ahead of the deferred Ws that held it up: Ws that were still running
// when its inputs arrived. A drain is often slowed a little at every rank of a microbatch's B
// chain, and only fixing all ranks at once shortens it. Returns false when nothing moves.
bool UnblockChain(const Problem& pr, const Timeline& tl, int j, Orders& orders) {
  bool moved = false;
  double arrival_from_above = 0;  // when B(r + 1, j)'s output reached rank r
  for (int r = pr.p - 1; r >= 0; --r) {
    auto& order = orders[r];
    int k = 0, f = -1;
    for (int x = 0; x < static_cast<int>(order.size()); ++x) {
      if (order[x].microbatch != j) continue;
      if (order[x].kind == ActionKind::kForward) f = x;
      if (order[x].kind == ActionKind::kBackwardInput) k = x;
    }
    const double arrival = std::max(f >= 0 ? tl.end[r][f] : 0.0, arrival_from_above);
    const double eps = 1e-9 * std::max(1.0, arrival);
    int to = k;
    while (to > 0 && order[to - 1].kind == ActionKind::kBackwardWeight &&
           tl.end[r][to - 1] > arrival + eps) {
      --to;
    }
    double end = tl.end[r][k];
    if (to < k) {
      std::rotate(order.begin() + to, order.begin() + k, order.begin() + k + 1);
      moved = true;
      // Where it now ends, if everything before it keeps its time.
      end = std::max(arrival, to > 0 ? tl.end[r][to - 1] : 0.0) + pr.cost->stages[r].b;
    }
    arrival_from_above = end + pr.cost->comm;
  }
  return moved;
}

// Beyond the paper's heuristic: local search on the best list schedule. Each round tries a few
// rewrites -- moving the last microbatches' Bs ahead of the Ws that held them up, and swapping
// actions on the critical path with the same-rank action that held them up -- and keeps the
// first that stays within memory and is strictly better. Bounded by `evaluations`.
void Polish(const Problem& pr, Orders& orders, Score& score, int evaluations) {
  Timeline tl, trial_tl;
  if (!Evaluate(pr, orders, /*check_memory=*/false, &tl)) return;
  Orders trial;
  while (evaluations > 0) {
    // The rewrites of this round, built one at a time (each is a copy of the whole plan):
    // the last three microbatches' chains, then the held-up pairs on the critical path all at
    // once (a path is often held up a little at every rank, and no single swap shortens it),
    // then each pair alone.
    const std::vector<std::pair<int, int>> pairs = HeldUpPairs(pr, orders, tl, /*limit=*/2 * pr.p);
    const int chains = std::min(pr.m, 3);
    const int rewrites = chains + static_cast<int>(std::min<size_t>(pairs.size(), 9));
    bool improved = false;
    for (int n = 0; n < rewrites && !improved; ++n) {
      trial = orders;
      if (n < chains) {
        if (!UnblockChain(pr, tl, pr.m - 1 - n, trial)) continue;
      } else if (n == chains) {
        if (pairs.size() < 2) continue;
        for (const auto& [r, k] : pairs) std::swap(trial[r][k - 1], trial[r][k]);
      } else {
        const auto& [r, k] = pairs[n - chains - 1];
        std::swap(trial[r][k - 1], trial[r][k]);
      }
      if (evaluations-- <= 0) break;
      std::optional<Score> s = Evaluate(pr, trial, /*check_memory=*/true, &trial_tl);
      if (s && *s < score) {
        score = *s;
        std::swap(orders, trial);
        std::swap(tl, trial_tl);
        improved = true;
      }
    }
    if (!improved) return;
  }
}

// The earliest of p wake-up times, kept in a tournament tree: set one in O(log p), read the
// earliest in O(1). Ties go to the lower rank.
class WakeTimes {
 public:
  explicit WakeTimes(int n) : leaves_(1) {
    while (leaves_ < n) leaves_ *= 2;
    time_.assign(leaves_, kInf);
    tree_.assign(2 * leaves_, 0);
    for (int i = 0; i < leaves_; ++i) tree_[leaves_ + i] = i;
    for (int i = leaves_ - 1; i >= 1; --i) tree_[i] = Earlier(tree_[2 * i], tree_[2 * i + 1]);
  }
  double at(int r) const { return time_[r]; }
  void Set(int r, double t) {
    time_[r] = t;
    for (int i = (leaves_ + r) / 2; i >= 1; i /= 2) {
      tree_[i] = Earlier(tree_[2 * i], tree_[2 * i + 1]);
    }
  }
  int Earliest() const { return tree_[1]; }

 private:
  int Earlier(int a, int b) const { return time_[b] < time_[a] ? b : a; }
  int leaves_;
  std::vector<double> time_;
  std::vector<int> tree_;
};

// One member of the policy family the list scheduler is run with.
struct Policy {
  std::vector<int> cap;  // per rank: most activations in flight (F done, B not yet)
  // Before a rank's first B: run a ready F even when it delays an already-known first B by up to
  // warmup_slack * T_F (kInf: always fill the warm-up with Fs).
  double warmup_slack = kInf;
  bool b_first = true;  // after the first B: a ready B goes before a ready F (else they alternate)
  double w_gap = 1;     // a deferred W fills an idle gap of at least w_gap * T_W
  // Per rank (empty = 0): how many Ws the rank keeps deferred instead of filling a gap with them.
  // Ranks near the end that hold a few Ws back pass the last microbatches' Bs on at once and
  // fill their own drain with the held Ws (the paper's heuristic lets them idle for the same
  // reason).
  std::vector<int> w_lag;
};

// The memory-bounded list scheduler. Returns the per-rank orders, or nullopt if the policy got
// stuck (only possible with memory deltas that the minimum-memory check does not cover).
std::optional<Orders> ListSchedule(const Problem& pr, const Policy& policy) {
  const int p = pr.p, m = pr.m;
  const CostModel& cost = *pr.cost;
  struct Rank {
    int next_f = 0, next_b = 0;
    std::deque<int> pending_w;
    double mem = 0;
    double free_at = 0;
    bool started_b = false;
    bool last_was_b = false;
  };
  std::vector<Rank> ranks(p);
  // When the inputs of F(r, i) / B(r, i) arrive from the neighbour rank; kInf while unknown.
  std::vector<double> ready_f(p * m, kInf), ready_b(p * m, kInf);
  for (int i = 0; i < m; ++i) ready_f[pr.Index(0, i)] = 0;
  Orders orders(p);
  for (auto& o : orders) o.reserve(3 * m);

  // When each rank next needs to decide (kInf: blocked until a neighbour makes an input known).
  // A rank only ever needs its earliest pending wake-up.
  WakeTimes wake(p);
  for (int r = 0; r < p; ++r) wake.Set(r, 0);
  auto wake_at = [&](int q, double time) {
    const double at = std::max(time, ranks[q].free_at);
    if (at < wake.at(q)) wake.Set(q, at);
  };
  int remaining = 3 * p * m;

  while (remaining > 0) {
    const int r = wake.Earliest();
    const double t = wake.at(r);
    if (t == kInf) break;  // every rank is blocked: stuck
    wake.Set(r, kInf);
    Rank& st = ranks[r];
    if (st.next_f == m && st.next_b == m && st.pending_w.empty()) continue;
    const StageCost& c = cost.stages[r];

    const bool f_left = st.next_f < m;
    const bool f_fits = pr.Fits(st.mem + c.mem_f);
    const bool f_allowed = f_left && f_fits && st.next_f - st.next_b < policy.cap[r];
    const bool b_left = st.next_b < st.next_f;
    const bool b_allowed = b_left && pr.Fits(st.mem + c.mem_b);
    const double rf = f_allowed ? ready_f[pr.Index(r, st.next_f)] : kInf;
    const double rb = b_allowed ? ready_b[pr.Index(r, st.next_b)] : kInf;
    const bool f_now = f_allowed && rf <= t;
    const bool b_now = b_allowed && rb <= t;

    std::optional<ActionKind> pick;  // none: the rank waits
    if (!st.started_b) {
      if (f_now) {
        const bool delays_b = rb < kInf && t + c.f > rb + policy.warmup_slack * c.f;
        if (!delays_b) {
          pick = ActionKind::kForward;
        } else if (b_now) {
          pick = ActionKind::kBackwardInput;
        }
      } else if (b_now) {
        pick = ActionKind::kBackwardInput;
      }
    } else if (b_now && f_now) {
      pick = (policy.b_first || !st.last_was_b) ? ActionKind::kBackwardInput
                                                 : ActionKind::kForward;
    } else if (b_now) {
      pick = ActionKind::kBackwardInput;
    } else if (f_now) {
      pick = ActionKind::kForward;
    }
    if (!pick && !st.pending_w.empty() && pr.Fits(st.mem + c.mem_w)) {
      if (f_left && !f_fits) {
        pick = ActionKind::kBackwardWeight;  // recycle memory for the next F
      } else {
        // The idle gap until an F or B could start. An input whose producer has not been
        // scheduled yet cannot arrive before that producer's duration plus T_comm.
        double next = kInf;
        if (f_allowed) {
          next = std::min(next, rf < kInf ? rf : t + cost.stages[r - 1].f + cost.comm);
        }
        if (b_allowed) {
          next = std::min(next, rb < kInf ? rb : t + cost.stages[r + 1].b + cost.comm);
        }
        const bool drain = !f_left && !b_left;
        const size_t lag = policy.w_lag.empty() ? 0 : policy.w_lag[r];
        if (next - t >= policy.w_gap * c.w && (drain || st.pending_w.size() > lag)) {
          pick = ActionKind::kBackwardWeight;
        }
      }
    }

    if (!pick) {
      // Wait for the earliest known arrival; unknown ones wake the rank when they are scheduled.
      double next_wake = kInf;
      if (rf > t) next_wake = std::min(next_wake, rf);
      if (rb > t) next_wake = std::min(next_wake, rb);
      if (next_wake < kInf) wake.Set(r, next_wake);
      continue;
    }

    Action action;
    if (pick == ActionKind::kForward) {
      const int i = st.next_f++;
      action = Action::F(r, i);
      st.mem += c.mem_f;
      const double end = t + c.f;
      if (r + 1 < p) {
        ready_f[pr.Index(r + 1, i)] = end + cost.comm;
        wake_at(r + 1, end + cost.comm);
      } else {
        ready_b[pr.Index(r, i)] = end;  // the loss closes the forward locally
      }
      st.last_was_b = false;
    } else if (pick == ActionKind::kBackwardInput) {
      const int i = st.next_b++;
      action = Action::B(r, i);
      st.mem += c.mem_b;
      st.pending_w.push_back(i);
      if (r > 0) {
        ready_b[pr.Index(r - 1, i)] = t + c.b + cost.comm;
        wake_at(r - 1, t + c.b + cost.comm);
      }
      st.started_b = true;
      st.last_was_b = true;
    } else {
      action = Action::W(r, st.pending_w.front());
      st.pending_w.pop_front();
      st.mem += c.mem_w;
    }
    orders[r].push_back(action);
    st.free_at = t + cost.Duration(action);
    wake.Set(r, st.free_at);
    --remaining;
  }
  if (remaining > 0) return std::nullopt;
  return orders;
}

// Knobs of the balanced-idle construction (BalancedSchedule).
struct FillPolicy {
  // Warm-up: a rank stops adding Fs before its first B once the next F would end after that B's
  // input arrives (else: once the rank is already past the arrival).
  bool tight_warmup = false;
  // A rank two or more Fs ahead of the next rank skips its F for a microbatch when the F would
  // delay the next rank's F + B and the rank has idled less than the most idle rank.
  bool hold_f = false;
  // An idle gap shorter than T_W that the rank may afford (its idle time stays within the most
  // idle rank's plus `allowance`): fill it with a W anyway (else leave the W for later).
  bool fill_affordable = true;
  // Extra idle time, in units of the rank's T_W, a rank may accumulate beyond the most idle
  // rank's before it must fill a gap with a W.
  double allowance = 0;
  // Per rank (empty = none): idle time the rank may reach even when no rank has idled that long
  // yet (RunBalanced sets it from a previous run, so that ranks that idled less there may wait
  // for their inputs instead of running a W that delays them).
  std::vector<double> rank_allowance;
};

// A balanced-idle construction's orders and, per rank, how long it waited after its first action.
struct Balanced {
  Orders orders;
  std::vector<double> idle;
  double most_idle = 0;
};

// A constructive pass after the ZB paper's heuristic (not a list scheduler): microbatch by
// microbatch, each rank gets its next F (first rank first), then each rank gets that
// microbatch's B (last rank first). Before each F or B a rank runs deferred Ws only where it
// must (memory), where a whole W fits the wait for the input, or where waiting would make the
// rank idle longer than the most idle rank so far. Idle time is what the span pays for, and the
// most idle rank sets it, so Ws the other ranks do not need now are held back for the drain.
// Returns nullopt when the memory limit leaves no move.
std::optional<Balanced> BalancedSchedule(const Problem& pr, const FillPolicy& fp) {
  const int p = pr.p, m = pr.m;
  const CostModel& cost = *pr.cost;
  std::vector<int> nf(p, 0), nb(p, 0), nw(p, 0);
  std::vector<double> free_at(p, 0), mem(p, 0), idle(p, 0);
  std::vector<double> end_f(size_t(p) * m, 0), end_b(size_t(p) * m, 0);
  double most_idle = 0;
  Orders orders(p);
  for (auto& o : orders) o.reserve(3 * m);
  // How long rank r may idle in all.
  auto afford = [&](int r) {
    return fp.rank_allowance.empty() ? most_idle : std::max(most_idle, fp.rank_allowance[r]);
  };

  // Appends the rank's next action of `kind`, timed as core::Simulate would.
  auto put = [&](int r, ActionKind kind) {
    const StageCost& c = cost.stages[r];
    Action action;
    double start = free_at[r];
    if (kind == ActionKind::kForward) {
      const int i = nf[r]++;
      action = Action::F(r, i);
      if (r > 0) start = std::max(start, end_f[pr.Index(r - 1, i)] + cost.comm);
      end_f[pr.Index(r, i)] = start + c.f;
    } else if (kind == ActionKind::kBackwardInput) {
      const int i = nb[r]++;
      action = Action::B(r, i);
      if (r + 1 < p) start = std::max(start, end_b[pr.Index(r + 1, i)] + cost.comm);
      end_b[pr.Index(r, i)] = start + c.b;
    } else {
      action = Action::W(r, nw[r]++);
    }
    if (!orders[r].empty()) {
      idle[r] += start - free_at[r];
      most_idle = std::max(most_idle, idle[r]);
    }
    mem[r] += cost.MemoryDelta(action);
    free_at[r] = start + cost.Duration(action);
    orders[r].push_back(action);
  };
  // Runs Ws until `delta` more memory fits; false when none is left to run.
  auto make_room = [&](int r, double delta) {
    while (!pr.Fits(mem[r] + delta)) {
      if (nw[r] >= nb[r]) return false;
      put(r, ActionKind::kBackwardWeight);
    }
    return true;
  };
  // Fills the wait of rank r for an input arriving at `arrival` with Ws, as described above.
  auto fill_wait = [&](int r, double arrival) {
    const double w = cost.stages[r].w;
    while (nw[r] < nb[r] && free_at[r] + w <= arrival) put(r, ActionKind::kBackwardWeight);
    if (nw[r] < nb[r] && free_at[r] < arrival) {
      const bool affordable = arrival - free_at[r] <= afford(r) - idle[r] + fp.allowance * w;
      if (!affordable || fp.fill_affordable) put(r, ActionKind::kBackwardWeight);
    }
  };
  auto forward = [&](int r) {
    if (!make_room(r, cost.stages[r].mem_f)) return false;
    if (r > 0) fill_wait(r, end_f[pr.Index(r - 1, nf[r])] + cost.comm);
    put(r, ActionKind::kForward);
    return true;
  };
  auto backward = [&](int r) {
    if (!make_room(r, cost.stages[r].mem_b)) return false;
    if (r + 1 < p) fill_wait(r, end_b[pr.Index(r + 1, nb[r])] + cost.comm);
    if (r == 0 && nf[0] == m) {
      while (nw[0] < nb[0]) put(0, ActionKind::kBackwardWeight);
    }
    put(r, ActionKind::kBackwardInput);
    return true;
  };

  // Warm-up: microbatch 0's F everywhere, then as many Fs per rank as fit before microbatch 0's B
  // comes back (estimated from the last rank down), fewer on each later rank.
  std::vector<int> extra(p, 0);
  for (int r = 0; r < p; ++r) {
    if (!forward(r)) return std::nullopt;
  }
  double b_back = end_f[pr.Index(p - 1, 0)] + cost.stages[p - 1].b;
  for (int r = p - 2; r >= 0; --r) {
    const StageCost& c = cost.stages[r];
    double at = free_at[r], room = mem[r];
    while (nf[r] + extra[r] < m && pr.Fits(room + c.mem_f)) {
      if (fp.tight_warmup ? at + c.f > b_back + cost.comm : at >= b_back + cost.comm) break;
      room += c.mem_f;
      at += c.f;
      ++extra[r];
    }
    b_back = std::max(at, b_back + cost.comm) + c.b;
  }
  for (int r = 1; r < p; ++r) {
    while (extra[r] > 0 && extra[r] >= extra[r - 1] && nf[r] + extra[r] < m) --extra[r];
  }
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < extra[r]; ++k) {
      if (!forward(r)) return std::nullopt;
    }
  }
  for (int r = p - 1; r >= 0; --r) {
    if (!backward(r)) return std::nullopt;
  }

  std::vector<int> want(p);
  for (int i = 1; i < m; ++i) {
    for (int r = 0; r < p; ++r) {
      want[r] = nf[r] < m ? 1 : 0;
      if (want[r] == 0 || !fp.hold_f || r + 1 == p || nf[r] < nf[r + 1] + 2) continue;
      const StageCost& c = cost.stages[r];
      const StageCost& next = cost.stages[r + 1];
      const double next_needs = free_at[r + 1] + next.f + next.b + cost.comm;
      if (free_at[r] >= next_needs) {
        want[r] = 0;
        continue;
      }
      // The Ws that memory would force before the F.
      double w_time = 0, room = mem[r] + c.mem_f;
      for (int k = nw[r]; !pr.Fits(room) && k < nb[r]; ++k) {
        w_time += c.w;
        room += c.mem_w;
      }
      if (free_at[r] + c.f + w_time <= next_needs) continue;
      if (next_needs - free_at[r] <= afford(r) - idle[r]) want[r] = 0;
    }
    for (int r = p - 2; r >= 0; --r) want[r] = std::min(want[r], want[r + 1]);
    for (int r = 0; r < p; ++r) {
      if (want[r] > 0 && !forward(r)) return std::nullopt;
    }
    for (int r = p - 1; r >= 0; --r) {
      if (nb[r] >= nf[r] || !backward(r)) return std::nullopt;
    }
  }
  for (int r = 0; r < p; ++r) {
    while (nw[r] < m) put(r, ActionKind::kBackwardWeight);
  }
  for (int r = 0; r < p; ++r) {
    double running = 0;
    for (const Action& a : orders[r]) {
      running += cost.MemoryDelta(a);
      if (!pr.Fits(running)) return std::nullopt;
    }
  }
  return Balanced{std::move(orders), std::move(idle), most_idle};
}

// Runs the balanced-idle construction with `fp`, then again with each rank allowed the idle time
// it fell short of the most idle rank's, for as long as that lowers the most idle rank's idle
// time; hands each plan to `consider` and charges `run_cost` of `work` per run.
template <typename Consider>
void RunBalanced(const Problem& pr, FillPolicy fp, int64_t& work, int64_t run_cost,
                 Consider consider) {
  double previous = kInf;
  for (int rerun = 0; rerun < 16 && work >= run_cost; ++rerun) {
    work -= run_cost;
    std::optional<Balanced> built = BalancedSchedule(pr, fp);
    if (!built) return;
    const double most_idle = built->most_idle;
    fp.rank_allowance.assign(pr.p, 0);
    for (int r = 0; r < pr.p; ++r) fp.rank_allowance[r] = most_idle - built->idle[r];
    consider(std::move(built->orders));
    if (!(most_idle < previous)) return;
    previous = most_idle;
  }
}

// The least memory rank r can run in: one microbatch at a time, F, B, W back to back (plus what
// every finished microbatch leaves behind when M_F + M_B + M_W > 0).
double MinimumMemory(const Problem& pr, int r) {
  const StageCost& c = pr.cost->stages[r];
  const double leak = std::max(0.0, c.mem_f + c.mem_b + c.mem_w);
  const double one = std::max({c.mem_f, c.mem_f + c.mem_b, c.mem_f + c.mem_b + c.mem_w, 0.0});
  return (pr.m - 1) * leak + one;
}

absl::Status CheckMinimumMemory(const Problem& pr, absl::string_view name) {
  for (int r = 0; r < pr.p; ++r) {
    const double need = MinimumMemory(pr, r);
    if (!pr.Fits(need)) {
      return WithField(
          absl::FailedPreconditionError(absl::StrCat(
              name, ": memory_limit ", pr.limit, " is below the ", need, " that rank ", r,
              " needs to run even one microbatch at a time; raise the memory limit")),
          "memory_limit");
    }
  }
  return absl::OkStatus();
}

// The in-flight caps cap_r = min(m, a * (p - r) + b), at least 1.
std::vector<int> Caps(const Problem& pr, int a, int b) {
  std::vector<int> cap(pr.p);
  for (int r = 0; r < pr.p; ++r) cap[r] = std::clamp(a * (pr.p - r) + b, 1, pr.m);
  return cap;
}

// Per rank, round(a * r) Ws held back (Policy::w_lag): the later ranks, with fewer activations
// in flight, have the memory to hold them.
std::vector<int> Lags(const Problem& pr, double a) {
  std::vector<int> lag(pr.p);
  for (int r = 0; r < pr.p; ++r) lag[r] = static_cast<int>(std::lround(a * r));
  return lag;
}

// The policy knobs tried for every cap shape, most useful first (on the paper's cost profiles
// the gap rule matters most, then the warm-up slack, and the F/B priority only now and then).
std::vector<Policy> Knobs(const std::vector<int>& cap) {
  std::vector<Policy> out;
  for (bool b_first : {true, false}) {
    for (double slack : {0.0, kInf, 0.5}) {
      for (double w_gap : {0.0, 1.0, 0.5}) out.push_back(Policy{cap, slack, b_first, w_gap, {}});
    }
  }
  return out;
}

// How many list-scheduler runs a generator may spend: about 1.5 million action steps in all, so
// p = 32, m = 256 costs ~0.2 s of CPU, and small problems try every candidate.
int Budget(const Problem& pr) {
  const long actions = 3L * pr.p * pr.m;
  return static_cast<int>(std::clamp(1'500'000L / std::max(actions, 1L), 8L, 160L));
}

// How many list-scheduler runs the greedy pass of the automatic scheduler spends: about 150
// thousand action steps, so that p = 32, m = 256 takes about 20 ms, and small problems try
// every candidate.
int GreedyRuns(const Problem& pr) {
  const long actions = 3L * pr.p * pr.m;
  return static_cast<int>(std::clamp(150'000L / std::max(actions, 1L), 6L, 160L));
}

// A list-scheduler run: the policy and the problem (memory limit) it runs under.
struct Candidate {
  const Problem* problem;
  Policy policy;
};

// A random member of the policy family, for the search: any cap shape a * (p - r) + b or none,
// any warm-up slack, F/B priority and gap rule.
Candidate RandomCandidate(const std::vector<Candidate>& family, SearchRng& rng) {
  const Problem* problem = family[rng.Uniform(static_cast<int>(family.size()))].problem;
  Policy policy;
  const int shape = rng.Uniform(4);
  policy.cap =
      shape == 0 ? std::vector<int>(problem->p, kNoCap) : Caps(*problem, shape, rng.Uniform(4) - 1);
  constexpr double kSlacks[] = {0.0, 0.25, 0.5, 1.0, 2.0, kInf};
  policy.warmup_slack = kSlacks[rng.Uniform(6)];
  policy.b_first = rng.Uniform(3) != 0;
  policy.w_gap = 1.5 * rng.Real();
  if (rng.Uniform(2) == 0) policy.w_lag = Lags(*problem, 1.5 * rng.Real());
  return {problem, std::move(policy)};
}

// A random member of the balanced-idle family: any switches, an allowance of up to 2 T_W.
FillPolicy RandomFill(SearchRng& rng) {
  FillPolicy fp;
  fp.tight_warmup = rng.Uniform(2) == 0;
  fp.hold_f = rng.Uniform(2) == 0;
  fp.fill_affordable = rng.Uniform(2) == 0;
  fp.allowance = rng.Uniform(3) == 0 ? 0 : 2 * rng.Real() - 0.5;
  return fp;
}

// Runs the first `greedy_runs` candidates (the greedy pass), then, with a search budget, the rest
// of them, random variants and local moves; keeps the best-scoring plan. `pr` is the request's
// own problem.
absl::StatusOr<Plan> BestOf(const Problem& pr, const std::vector<Candidate>& candidates,
                            size_t greedy_runs, int polish_evaluations, absl::string_view name,
                            const SearchOptions& search = {}) {
  std::optional<Orders> best;
  Score best_score;
  const int64_t actions = 3L * pr.p * pr.m;
  const int64_t run_cost = 2 * actions;  // a list-scheduler run and its evaluation
  int64_t work = SearchWork(search.budget_seconds);
  auto consider = [&](std::optional<Orders> orders) {
    if (!orders) return;
    std::optional<Score> score = Evaluate(pr, *orders);
    if (!score) return;  // cannot happen: the scheduler's own timeline is a witness
    if (!best || *score < best_score) {
      best_score = *score;
      best = std::move(orders);
    }
  };
  auto run = [&](const Candidate& candidate) {
    consider(ListSchedule(*candidate.problem, candidate.policy));
  };
  // A search ends with the balanced-idle construction, each combination of its switches; its
  // work is set aside here.
  int64_t balanced_work = std::min(work, 8 * 16 * run_cost);
  work -= balanced_work;
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (k >= greedy_runs) {
      if (work < run_cost) break;
      work -= run_cost;
    }
    run(candidates[k]);
  }
  if (!best) {
    // Every policy got stuck (memory deltas where a B or W needs room, all of it taken by Fs).
    // One microbatch in flight per rank always fits a limit that passed CheckMinimumMemory.
    best = ListSchedule(pr, Policy{std::vector<int>(pr.p, 1), kInf, true, 0, {}});
    if (best) best_score = Evaluate(pr, *best).value_or(Score{});
  }
  if (!best) {
    return WithField(absl::FailedPreconditionError(absl::StrCat(
                         name, ": no schedule fits the memory limit ", pr.limit, " with p = ", pr.p,
                         ", m = ", pr.m, "; raise the memory limit")),
                     "memory_limit");
  }
  Polish(pr, *best, best_score, polish_evaluations);
  const double bound =
      SpanLowerBound(Placement::Linear(pr.p), pr.m, *pr.cost, pr.limit, /*split_backward=*/true);
  if (work > 0 && !candidates.empty() && !AtBound(best_score.span, bound)) {
    // The search: a third of what is left on random policies, then critical-path polishing and
    // local moves on the best plan.
    SearchRng rng(search.seed);
    int64_t variants = std::min(work / 3, kMaxRandomPolicies * run_cost);
    // Random list-scheduler policies and random members of the balanced-idle family in turn.
    while (variants >= run_cost && !AtBound(best_score.span, bound)) {
      const int64_t before = variants;
      if (rng.Uniform(2) == 0) {
        RunBalanced(pr, RandomFill(rng), variants, run_cost, consider);
      } else {
        variants -= run_cost;
        run(RandomCandidate(candidates, rng));
      }
      work -= before - variants;
    }
    const int polish = static_cast<int>(std::min<int64_t>(work / 4 / actions, 1 << 20));
    work -= int64_t{polish} * actions;
    Polish(pr, *best, best_score, polish);
    const OrderProblem problem(Placement::Linear(pr.p), pr.m, *pr.cost, pr.limit);
    if (std::optional<OrderScore> score = problem.Evaluate(*best)) {
      ImproveOrders(problem, *best, *score, work, rng.Next(), bound);
    }
  }
  if (balanced_work > 0) {
    best_score = Evaluate(pr, *best).value_or(best_score);
    for (int k = 0; k < 8; ++k) {
      RunBalanced(pr, FillPolicy{(k & 1) != 0, (k & 2) != 0, (k & 4) == 0, 0, {}}, balanced_work,
                  run_cost, consider);
    }
  }
  Plan plan = EmptyPlan(std::string(name), Placement::Linear(pr.p), pr.m);
  plan.ranks = std::move(*best);
  return plan;
}

absl::StatusOr<Problem> MakeProblem(const ScheduleRequest& req, double memory_limit,
                                    absl::string_view name) {
  Problem pr;
  pr.p = req.pipeline;
  pr.m = req.microbatches;
  pr.cost = &req.cost;
  pr.limit = memory_limit;
  pr.tol = 1e-9 * std::max(1.0, std::abs(memory_limit));
  if (pr.p < 1 || pr.m < 1 || req.cost.num_stages() != pr.p) {
    return WithField(absl::InvalidArgumentError(absl::StrCat(
                         name, ": needs p >= 1, m >= 1 and one cost entry per stage (p = ", pr.p,
                         ", m = ", pr.m, ", stages = ", req.cost.num_stages(), ")")),
                     "cost");
  }
  if (!std::isfinite(memory_limit)) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat(name, ": memory_limit must be finite")),
        "memory_limit");
  }
  if (absl::Status s = CheckMinimumMemory(pr, name); !s.ok()) return s;
  return pr;
}

// A handcrafted schedule: the in-flight cap a * (p - r) + b, Ws deferred into the bubbles.
absl::StatusOr<Plan> Handcrafted(const ScheduleRequest& req, double memory_limit,
                                 absl::string_view name, int a, int b) {
  absl::StatusOr<Problem> pr = MakeProblem(req, memory_limit, name);
  if (!pr.ok()) return pr.status();
  std::vector<Candidate> candidates;
  for (Policy& policy : Knobs(Caps(*pr, a, b))) candidates.push_back({&*pr, std::move(policy)});
  candidates.resize(std::min<size_t>(candidates.size(), std::max(6, Budget(*pr) / 2)));
  return BestOf(*pr, candidates, candidates.size(), std::max(16, Budget(*pr) / 2), name);
}

}  // namespace

absl::StatusOr<Plan> GenerateZbH1(const ScheduleRequest& req, double memory_limit) {
  return Handcrafted(req, memory_limit, "zb-h1", 1, 0);
}

absl::StatusOr<Plan> GenerateZbH2(const ScheduleRequest& req, double memory_limit) {
  return Handcrafted(req, memory_limit, "zb-h2", 2, -1);
}

absl::StatusOr<Plan> GenerateZbAuto(const ScheduleRequest& req, double memory_limit,
                                    absl::string_view name) {
  absl::StatusOr<Problem> pr = MakeProblem(req, memory_limit, name);
  if (!pr.ok()) return pr.status();
  // Memory alone bounds the automatic scheduler; the capped shapes are extra candidates that
  // sometimes avoid an over-eager warm-up. A plan made under a lower limit fits this one too, and
  // running one activation below the limit changes when the greedy recycles memory, which now and
  // then pays off.
  double max_mem_f = 0;
  for (const StageCost& c : req.cost.stages) max_mem_f = std::max(max_mem_f, c.mem_f);
  std::vector<Problem> tiers = {*pr};
  Problem lower = *pr;
  lower.limit -= max_mem_f;
  if (max_mem_f > 0 && CheckMinimumMemory(lower, name).ok()) tiers.push_back(lower);
  std::vector<std::vector<Policy>> runs;  // per (tier, shape): its knobs, most useful first
  std::vector<const Problem*> run_problem;
  for (const Problem& tier : tiers) {
    for (const std::vector<int>& cap :
         {std::vector<int>(pr->p, kNoCap), Caps(*pr, 2, -1), Caps(*pr, 1, 0), Caps(*pr, 2, 0)}) {
      runs.push_back(Knobs(cap));
      run_problem.push_back(&tier);
    }
  }
  // Round-robin over the runs, so that the greedy pass's few runs still try the best knobs
  // everywhere; a search runs the rest.
  std::vector<Candidate> candidates;
  for (size_t k = 0; k < runs[0].size(); ++k) {
    for (size_t j = 0; j < runs.size(); ++j) candidates.push_back({run_problem[j], runs[j][k]});
  }
  const int greedy_runs = GreedyRuns(*pr);
  if (greedy_runs < static_cast<int>(candidates.size())) {
    // A short greedy pass starts with the (knob, shape) pairs that win most often at large
    // p * m: no cap and the 1F1B-like cap with the first knobs, then the rest in order.
    constexpr size_t kHead[] = {0, 2, 8, 1, 3, 10};
    std::vector<Candidate> ordered;
    for (size_t k : kHead) ordered.push_back(candidates[k]);
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (std::find(std::begin(kHead), std::end(kHead), k) == std::end(kHead)) {
        ordered.push_back(candidates[k]);
      }
    }
    candidates = std::move(ordered);
  }
  return BestOf(*pr, candidates, greedy_runs, std::max(4, greedy_runs / 2), name, req.search);
}

}  // namespace zpipe::core::internal
