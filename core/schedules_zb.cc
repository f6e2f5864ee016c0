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

// The memory-bounded list scheduler. Run() returns the per-rank orders, or nullopt if the policy
// got stuck (only possible with memory deltas that the minimum-memory check does not cover).
class ListScheduler {
 public:
  ListScheduler(const Problem& pr, const Policy& policy)
      : pr_(pr),
        policy_(policy),
        cost_(*pr.cost),
        ranks_(pr.p),
        ready_f_(pr.p * pr.m, kInf),
        ready_b_(pr.p * pr.m, kInf),
        orders_(pr.p),
        wake_(pr.p),
        remaining_(3 * pr.p * pr.m) {
    for (int i = 0; i < pr.m; ++i) ready_f_[pr.Index(0, i)] = 0;
    for (auto& o : orders_) o.reserve(3 * pr.m);
    for (int r = 0; r < pr.p; ++r) wake_.Set(r, 0);
  }

  std::optional<Orders> Run() && {
    while (remaining_ > 0) {
      const int r = wake_.Earliest();
      const double t = wake_.at(r);
      if (t == kInf) break;  // every rank is blocked: stuck
      wake_.Set(r, kInf);
      const Rank& st = ranks_[r];
      if (st.next_f == pr_.m && st.next_b == pr_.m && st.pending_w.empty()) continue;
      const Choices ch = ChoicesOf(r, t);
      std::optional<ActionKind> pick = PickForwardOrBackward(r, ch, t);  // none: the rank waits
      if (!pick && WantsW(r, ch, t)) pick = ActionKind::kBackwardWeight;
      if (!pick) {
        Wait(r, ch, t);
        continue;
      }
      Start(r, *pick, t);
    }
    if (remaining_ > 0) return std::nullopt;
    return std::move(orders_);
  }

 private:
  struct Rank {
    int next_f = 0, next_b = 0;
    std::deque<int> pending_w;
    double mem = 0;
    double free_at = 0;
    bool started_b = false;
    bool last_was_b = false;
  };
  // What rank r may run next at time t.
  struct Choices {
    bool f_left = false;                // an F is left to run
    bool f_fits = false;                // and its memory fits
    bool f_allowed = false;             // and the in-flight cap allows it
    bool b_left = false;                // a B is left whose F has run
    bool b_allowed = false;             // and its memory fits
    double rf = kInf, rb = kInf;        // when an allowed F / B's input arrives (kInf: unknown)
    bool f_now = false, b_now = false;  // it has arrived
  };

  // Rank q may need to decide at `time`: keeps its earliest pending wake-up.
  void WakeAt(int q, double time) {
    const double at = std::max(time, ranks_[q].free_at);
    if (at < wake_.at(q)) wake_.Set(q, at);
  }

  Choices ChoicesOf(int r, double t) const {
    const Rank& st = ranks_[r];
    const StageCost& c = cost_.stages[r];
    Choices ch;
    ch.f_left = st.next_f < pr_.m;
    ch.f_fits = pr_.Fits(st.mem + c.mem_f);
    ch.f_allowed = ch.f_left && ch.f_fits && st.next_f - st.next_b < policy_.cap[r];
    ch.b_left = st.next_b < st.next_f;
    ch.b_allowed = ch.b_left && pr_.Fits(st.mem + c.mem_b);
    ch.rf = ch.f_allowed ? ready_f_[pr_.Index(r, st.next_f)] : kInf;
    ch.rb = ch.b_allowed ? ready_b_[pr_.Index(r, st.next_b)] : kInf;
    ch.f_now = ch.f_allowed && ch.rf <= t;
    ch.b_now = ch.b_allowed && ch.rb <= t;
    return ch;
  }

  // The policy's choice between a ready F and a ready B; none when neither should run.
  std::optional<ActionKind> PickForwardOrBackward(int r, const Choices& ch, double t) const {
    const Rank& st = ranks_[r];
    const StageCost& c = cost_.stages[r];
    if (!st.started_b) {
      // The warm-up: Fs, unless one would delay the first B by more than the slack.
      if (ch.f_now) {
        const bool delays_b = ch.rb < kInf && t + c.f > ch.rb + policy_.warmup_slack * c.f;
        if (!delays_b) return ActionKind::kForward;
        if (ch.b_now) return ActionKind::kBackwardInput;
        return std::nullopt;
      }
      if (ch.b_now) return ActionKind::kBackwardInput;
      return std::nullopt;
    }
    if (ch.b_now && ch.f_now) {
      return (policy_.b_first || !st.last_was_b) ? ActionKind::kBackwardInput
                                                 : ActionKind::kForward;
    }
    if (ch.b_now) return ActionKind::kBackwardInput;
    if (ch.f_now) return ActionKind::kForward;
    return std::nullopt;
  }

  // Whether rank r, with no F or B to run, runs one of its deferred Ws now.
  bool WantsW(int r, const Choices& ch, double t) const {
    const Rank& st = ranks_[r];
    const StageCost& c = cost_.stages[r];
    if (st.pending_w.empty() || !pr_.Fits(st.mem + c.mem_w)) return false;
    if (ch.f_left && !ch.f_fits) return true;  // recycle memory for the next F
    // The idle gap until an F or B could start. An input whose producer has not been
    // scheduled yet cannot arrive before that producer's duration plus T_comm.
    double next = kInf;
    if (ch.f_allowed) {
      next = std::min(next, ch.rf < kInf ? ch.rf : t + cost_.stages[r - 1].f + cost_.comm);
    }
    if (ch.b_allowed) {
      next = std::min(next, ch.rb < kInf ? ch.rb : t + cost_.stages[r + 1].b + cost_.comm);
    }
    const bool drain = !ch.f_left && !ch.b_left;
    const size_t lag = policy_.w_lag.empty() ? 0 : policy_.w_lag[r];
    return next - t >= policy_.w_gap * c.w && (drain || st.pending_w.size() > lag);
  }

  // Wait for the earliest known arrival; unknown ones wake the rank when they are scheduled.
  void Wait(int r, const Choices& ch, double t) {
    double next_wake = kInf;
    if (ch.rf > t) next_wake = std::min(next_wake, ch.rf);
    if (ch.rb > t) next_wake = std::min(next_wake, ch.rb);
    if (next_wake < kInf) wake_.Set(r, next_wake);
  }

  // Starts rank r's next action of `kind` at t and tells the neighbour its input's arrival.
  void Start(int r, ActionKind kind, double t) {
    Rank& st = ranks_[r];
    const StageCost& c = cost_.stages[r];
    Action action;
    if (kind == ActionKind::kForward) {
      const int i = st.next_f++;
      action = Action::F(r, i);
      st.mem += c.mem_f;
      const double end = t + c.f;
      if (r + 1 < pr_.p) {
        ready_f_[pr_.Index(r + 1, i)] = end + cost_.comm;
        WakeAt(r + 1, end + cost_.comm);
      } else {
        ready_b_[pr_.Index(r, i)] = end;  // the loss closes the forward locally
      }
      st.last_was_b = false;
    } else if (kind == ActionKind::kBackwardInput) {
      const int i = st.next_b++;
      action = Action::B(r, i);
      st.mem += c.mem_b;
      st.pending_w.push_back(i);
      if (r > 0) {
        ready_b_[pr_.Index(r - 1, i)] = t + c.b + cost_.comm;
        WakeAt(r - 1, t + c.b + cost_.comm);
      }
      st.started_b = true;
      st.last_was_b = true;
    } else {
      action = Action::W(r, st.pending_w.front());
      st.pending_w.pop_front();
      st.mem += c.mem_w;
    }
    orders_[r].push_back(action);
    st.free_at = t + cost_.Duration(action);
    wake_.Set(r, st.free_at);
    --remaining_;
  }

  const Problem& pr_;
  const Policy& policy_;
  const CostModel& cost_;
  std::vector<Rank> ranks_;
  // When the inputs of F(r, i) / B(r, i) arrive from the neighbour rank; kInf while unknown.
  std::vector<double> ready_f_, ready_b_;
  Orders orders_;
  // When each rank next needs to decide (kInf: blocked until a neighbour makes an input known).
  // A rank only ever needs its earliest pending wake-up.
  WakeTimes wake_;
  int remaining_;  // actions not started yet
};

std::optional<Orders> ListSchedule(const Problem& pr, const Policy& policy) {
  return ListScheduler(pr, policy).Run();
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
// Build() returns nullopt when the memory limit leaves no move.
class BalancedBuilder {
 public:
  BalancedBuilder(const Problem& pr, const FillPolicy& fp)
      : pr_(pr),
        fp_(fp),
        cost_(*pr.cost),
        nf_(pr.p, 0),
        nb_(pr.p, 0),
        nw_(pr.p, 0),
        free_at_(pr.p, 0),
        mem_(pr.p, 0),
        idle_(pr.p, 0),
        end_f_(size_t(pr.p) * pr.m, 0),
        end_b_(size_t(pr.p) * pr.m, 0),
        orders_(pr.p) {
    for (auto& o : orders_) o.reserve(3 * pr.m);
  }

  std::optional<Balanced> Build() && {
    if (!WarmUp()) return std::nullopt;
    for (int i = 1; i < pr_.m; ++i) {
      if (!NextMicrobatch()) return std::nullopt;
    }
    for (int r = 0; r < pr_.p; ++r) {
      while (nw_[r] < pr_.m) Put(r, ActionKind::kBackwardWeight);
    }
    if (!WithinMemory()) return std::nullopt;
    return Balanced{std::move(orders_), std::move(idle_), most_idle_};
  }

 private:
  // How long rank r may idle in all.
  double Afford(int r) const {
    return fp_.rank_allowance.empty() ? most_idle_ : std::max(most_idle_, fp_.rank_allowance[r]);
  }

  // Appends the rank's next action of `kind`, timed as core::Simulate would.
  void Put(int r, ActionKind kind) {
    const StageCost& c = cost_.stages[r];
    Action action;
    double start = free_at_[r];
    if (kind == ActionKind::kForward) {
      const int i = nf_[r]++;
      action = Action::F(r, i);
      if (r > 0) start = std::max(start, end_f_[pr_.Index(r - 1, i)] + cost_.comm);
      end_f_[pr_.Index(r, i)] = start + c.f;
    } else if (kind == ActionKind::kBackwardInput) {
      const int i = nb_[r]++;
      action = Action::B(r, i);
      if (r + 1 < pr_.p) start = std::max(start, end_b_[pr_.Index(r + 1, i)] + cost_.comm);
      end_b_[pr_.Index(r, i)] = start + c.b;
    } else {
      action = Action::W(r, nw_[r]++);
    }
    if (!orders_[r].empty()) {
      idle_[r] += start - free_at_[r];
      most_idle_ = std::max(most_idle_, idle_[r]);
    }
    mem_[r] += cost_.MemoryDelta(action);
    free_at_[r] = start + cost_.Duration(action);
    orders_[r].push_back(action);
  }

  // Runs Ws until `delta` more memory fits; false when none is left to run.
  bool MakeRoom(int r, double delta) {
    while (!pr_.Fits(mem_[r] + delta)) {
      if (nw_[r] >= nb_[r]) return false;
      Put(r, ActionKind::kBackwardWeight);
    }
    return true;
  }

  // Fills the wait of rank r for an input arriving at `arrival` with Ws, as described above.
  void FillWait(int r, double arrival) {
    const double w = cost_.stages[r].w;
    while (nw_[r] < nb_[r] && free_at_[r] + w <= arrival) Put(r, ActionKind::kBackwardWeight);
    if (nw_[r] < nb_[r] && free_at_[r] < arrival) {
      const bool affordable = arrival - free_at_[r] <= Afford(r) - idle_[r] + fp_.allowance * w;
      if (!affordable || fp_.fill_affordable) Put(r, ActionKind::kBackwardWeight);
    }
  }

  bool Forward(int r) {
    if (!MakeRoom(r, cost_.stages[r].mem_f)) return false;
    if (r > 0) FillWait(r, end_f_[pr_.Index(r - 1, nf_[r])] + cost_.comm);
    Put(r, ActionKind::kForward);
    return true;
  }

  bool Backward(int r) {
    if (!MakeRoom(r, cost_.stages[r].mem_b)) return false;
    if (r + 1 < pr_.p) FillWait(r, end_b_[pr_.Index(r + 1, nb_[r])] + cost_.comm);
    if (r == 0 && nf_[0] == pr_.m) {
      while (nw_[0] < nb_[0]) Put(0, ActionKind::kBackwardWeight);
    }
    Put(r, ActionKind::kBackwardInput);
    return true;
  }

  // Microbatch 0's F everywhere, then the extra Fs of WarmUpExtras, then microbatch 0's B.
  bool WarmUp() {
    const int p = pr_.p;
    for (int r = 0; r < p; ++r) {
      if (!Forward(r)) return false;
    }
    const std::vector<int> extra = WarmUpExtras();
    for (int r = 0; r < p; ++r) {
      for (int k = 0; k < extra[r]; ++k) {
        if (!Forward(r)) return false;
      }
    }
    for (int r = p - 1; r >= 0; --r) {
      if (!Backward(r)) return false;
    }
    return true;
  }

  // Per rank, as many more Fs as fit before microbatch 0's B comes back (estimated from the last
  // rank down), fewer on each later rank.
  std::vector<int> WarmUpExtras() const {
    const int p = pr_.p, m = pr_.m;
    std::vector<int> extra(p, 0);
    double b_back = end_f_[pr_.Index(p - 1, 0)] + cost_.stages[p - 1].b;
    for (int r = p - 2; r >= 0; --r) {
      const StageCost& c = cost_.stages[r];
      double at = free_at_[r], room = mem_[r];
      while (nf_[r] + extra[r] < m && pr_.Fits(room + c.mem_f)) {
        if (fp_.tight_warmup ? at + c.f > b_back + cost_.comm : at >= b_back + cost_.comm) break;
        room += c.mem_f;
        at += c.f;
        ++extra[r];
      }
      b_back = std::max(at, b_back + cost_.comm) + c.b;
    }
    for (int r = 1; r < p; ++r) {
      while (extra[r] > 0 && extra[r] >= extra[r - 1] && nf_[r] + extra[r] < m) --extra[r];
    }
    return extra;
  }

  // One more microbatch's Fs (on the ranks that want one) and Bs.
  bool NextMicrobatch() {
    const int p = pr_.p;
    const std::vector<int> want = WantForwards();
    for (int r = 0; r < p; ++r) {
      if (want[r] > 0 && !Forward(r)) return false;
    }
    for (int r = p - 1; r >= 0; --r) {
      if (nb_[r] >= nf_[r] || !Backward(r)) return false;
    }
    return true;
  }

  // Per rank, 1 when it takes its next F this microbatch: while it has Fs left, unless hold_f
  // holds it (see FillPolicy) or a later rank holds its own.
  std::vector<int> WantForwards() const {
    const int p = pr_.p;
    std::vector<int> want(p);
    for (int r = 0; r < p; ++r) {
      want[r] = nf_[r] < pr_.m ? 1 : 0;
      if (want[r] == 0 || !fp_.hold_f || r + 1 == p || nf_[r] < nf_[r + 1] + 2) continue;
      if (HoldsForward(r)) want[r] = 0;
    }
    for (int r = p - 2; r >= 0; --r) want[r] = std::min(want[r], want[r + 1]);
    return want;
  }

  // Whether rank r, two or more Fs ahead of rank r + 1, skips its F: the F (and the Ws memory
  // forces before it) would delay rank r + 1's F + B, and rank r can afford the wait.
  bool HoldsForward(int r) const {
    const StageCost& c = cost_.stages[r];
    const StageCost& next = cost_.stages[r + 1];
    const double next_needs = free_at_[r + 1] + next.f + next.b + cost_.comm;
    if (free_at_[r] >= next_needs) return true;
    // The Ws that memory would force before the F.
    double w_time = 0, room = mem_[r] + c.mem_f;
    for (int k = nw_[r]; !pr_.Fits(room) && k < nb_[r]; ++k) {
      w_time += c.w;
      room += c.mem_w;
    }
    if (free_at_[r] + c.f + w_time <= next_needs) return false;
    return next_needs - free_at_[r] <= Afford(r) - idle_[r];
  }

  // Whether every rank's running memory stays within the limit.
  bool WithinMemory() const {
    for (int r = 0; r < pr_.p; ++r) {
      double running = 0;
      for (const Action& a : orders_[r]) {
        running += cost_.MemoryDelta(a);
        if (!pr_.Fits(running)) return false;
      }
    }
    return true;
  }

  const Problem& pr_;
  const FillPolicy& fp_;
  const CostModel& cost_;
  std::vector<int> nf_, nb_, nw_;             // per rank: Fs, Bs and Ws placed
  std::vector<double> free_at_, mem_, idle_;  // per rank
  std::vector<double> end_f_, end_b_;         // per (rank, microbatch)
  double most_idle_ = 0;
  Orders orders_;
};

std::optional<Balanced> BalancedSchedule(const Problem& pr, const FillPolicy& fp) {
  return BalancedBuilder(pr, fp).Build();
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
class BestOfSearch {
 public:
  BestOfSearch(const Problem& pr, const std::vector<Candidate>& candidates, absl::string_view name,
               const SearchOptions& search)
      : pr_(pr),
        candidates_(candidates),
        name_(name),
        search_(search),
        actions_(3L * pr.p * pr.m),
        run_cost_(2 * actions_),
        work_(SearchWork(search.budget_seconds)),
        span_bound_(SpanLowerBound(Placement::Linear(pr.p), pr.m, *pr.cost, pr.limit,
                                   /*split_backward=*/true)),
        makespan_bound_(MakespanLowerBound(Placement::Linear(pr.p), pr.m, *pr.cost)) {}

  absl::StatusOr<Plan> Run(size_t greedy_runs, int polish_evaluations) && {
    // A search ends with the balanced-idle construction, each combination of its switches; its
    // work is set aside here.
    int64_t balanced_work = std::min(work_, 8 * 16 * run_cost_);
    work_ -= balanced_work;
    RunCandidates(greedy_runs);
    if (!best_) RunFallback();
    if (!best_) {
      return WithField(absl::FailedPreconditionError(absl::StrCat(
                           name_, ": no schedule fits the memory limit ", pr_.limit,
                           " with p = ", pr_.p, ", m = ", pr_.m, "; raise the memory limit")),
                       "memory_limit");
    }
    if (!Unbeatable()) {
      Polish(pr_, *best_, best_score_, polish_evaluations);
      if (work_ > 0 && !candidates_.empty() && !AtBound(best_score_.span, span_bound_)) {
        Search(span_bound_);
      }
      if (balanced_work > 0) RunBalancedFamily(balanced_work);
    }
    Plan plan = EmptyPlan(std::string(name_), Placement::Linear(pr_.p), pr_.m);
    plan.ranks = std::move(*best_);
    return plan;
  }

 private:
  // Whether no plan can score better than the best so far (Score::operator<): its span is at
  // most the span's lower bound and its global span at most the makespan's. Every later step
  // keeps a plan only when it scores better (Search runs only above the span bound), so the rest
  // of the run could not change the plan: it is skipped. On uniform costs the greedy pass's
  // plan often is such a plan (ZB-2p at p = 32, m = 256: span 768, makespan 799 = 31 + 768),
  // and skipping the search's remaining candidates is most of `zpipe plan`'s time there.
  bool Unbeatable() const {
    return best_.has_value() && best_score_.span <= span_bound_ &&
           best_score_.global_span <= makespan_bound_;
  }

  // Keeps `orders` when they score best so far.
  void Consider(std::optional<Orders> orders) {
    if (!orders) return;
    std::optional<Score> score = Evaluate(pr_, *orders);
    if (!score) return;  // cannot happen: the scheduler's own timeline is a witness
    if (!best_ || *score < best_score_) {
      best_score_ = *score;
      best_ = std::move(orders);
    }
  }
  void RunCandidate(const Candidate& candidate) {
    Consider(ListSchedule(*candidate.problem, candidate.policy));
  }

  // The first `greedy_runs` candidates, then the rest while the search budget lasts.
  void RunCandidates(size_t greedy_runs) {
    for (size_t k = 0; k < candidates_.size() && !Unbeatable(); ++k) {
      if (k >= greedy_runs) {
        if (work_ < run_cost_) break;
        work_ -= run_cost_;
      }
      RunCandidate(candidates_[k]);
    }
  }

  // Every policy got stuck (memory deltas where a B or W needs room, all of it taken by Fs).
  // One microbatch in flight per rank always fits a limit that passed CheckMinimumMemory.
  void RunFallback() {
    best_ = ListSchedule(pr_, Policy{std::vector<int>(pr_.p, 1), kInf, true, 0, {}});
    if (best_) best_score_ = Evaluate(pr_, *best_).value_or(Score{});
  }

  // The search: a third of what is left on random policies, then critical-path polishing and
  // local moves on the best plan.
  void Search(double bound) {
    SearchRng rng(search_.seed);
    int64_t variants = std::min(work_ / 3, kMaxRandomPolicies * run_cost_);
    // Random list-scheduler policies and random members of the balanced-idle family in turn.
    while (variants >= run_cost_ && !AtBound(best_score_.span, bound)) {
      const int64_t before = variants;
      if (rng.Uniform(2) == 0) {
        RunBalanced(pr_, RandomFill(rng), variants, run_cost_,
                    [this](std::optional<Orders> orders) { Consider(std::move(orders)); });
      } else {
        variants -= run_cost_;
        RunCandidate(RandomCandidate(candidates_, rng));
      }
      work_ -= before - variants;
    }
    const int polish = static_cast<int>(std::min<int64_t>(work_ / 4 / actions_, 1 << 20));
    work_ -= int64_t{polish} * actions_;
    Polish(pr_, *best_, best_score_, polish);
    const OrderProblem problem(Placement::Linear(pr_.p), pr_.m, *pr_.cost, pr_.limit);
    if (std::optional<OrderScore> score = problem.Evaluate(*best_)) {
      ImproveOrders(problem, *best_, *score, work_, rng.Next(), bound);
    }
  }

  // The balanced-idle construction with each combination of its switches.
  void RunBalancedFamily(int64_t balanced_work) {
    best_score_ = Evaluate(pr_, *best_).value_or(best_score_);
    for (int k = 0; k < 8; ++k) {
      RunBalanced(pr_, FillPolicy{(k & 1) != 0, (k & 2) != 0, (k & 4) == 0, 0, {}}, balanced_work,
                  run_cost_, [this](std::optional<Orders> orders) { Consider(std::move(orders)); });
    }
  }

  const Problem& pr_;
  const std::vector<Candidate>& candidates_;
  const absl::string_view name_;
  const SearchOptions& search_;
  const int64_t actions_;
  const int64_t run_cost_;  // a list-scheduler run and its evaluation
  int64_t work_;            // what is left of the search budget
  const double span_bound_, makespan_bound_;  // no plan of the problem does better
  std::optional<Orders> best_;
  Score best_score_;
};

absl::StatusOr<Plan> BestOf(const Problem& pr, const std::vector<Candidate>& candidates,
                            size_t greedy_runs, int polish_evaluations, absl::string_view name,
                            const SearchOptions& search = {}) {
  return BestOfSearch(pr, candidates, name, search).Run(greedy_runs, polish_evaluations);
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
