// Internal: timing and local search of per-rank compute orders, shared by the ZB and V generators.
//
// A candidate plan is its per-rank order of F, B and W actions; everything else (when each
// action runs) follows from core::Simulate's rules. OrderProblem times an order and checks its
// memory the way the validator does, and ImproveOrders rewrites an order by small moves (move an
// action on the critical path ahead of the one before it or behind the one after, fill an idle
// gap with a later W, move an action that its own rank held up earlier, shift an action a few
// places, swap two) and keeps a move only when the order still completes within the
// memory limit and its score does not get worse (in a second phase: no worse than a few dozen
// moves ago, see ImproveOrders); between the two phases, OrderProblem::Recreate rebuilds
// everything after a random cut at once. Moves are drawn from a seeded generator that does not
// depend on the standard library's distributions, so a (seed, work) pair gives the same plan on
// every platform.
//
// Work is counted in simulated actions, not seconds: the search stops after a deterministic
// amount of work, so its result does not depend on the machine's speed or load.
// SearchWork() converts the user's time budget at a fixed rate measured on this project's
// development machine. A move or a rebuilt cool-down is timed only from the earliest start it
// touched (OrderProblem::EvaluateFrom); what starts earlier is copied, at an eighth of the
// work.
#ifndef ZPIPE_CORE_INTERNAL_ORDER_SEARCH_H_
#define ZPIPE_CORE_INTERNAL_ORDER_SEARCH_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/cost_model.h"
#include "core/placement.h"
#include "core/plan.h"

namespace zpipe::core::internal {

using Orders = std::vector<std::vector<Action>>;

// Lexicographic: docs/design.md's span, then the global makespan, then the sum of the ranks' own
// spans (so that a move shortening a rank that is not the longest still counts as progress).
struct OrderScore {
  double span = 0;
  double makespan = 0;
  double total = 0;
  bool operator<(const OrderScore& o) const;
  bool operator<=(const OrderScore& o) const { return !(o < *this); }
};

struct OrderTimeline {
  std::vector<std::vector<double>> start, end;  // indexed like the orders
  std::vector<std::vector<double>> mem;          // a rank's memory once the action ran
  // When each F and each B (or BW) ended, per (stage, microbatch): what a timing from part of
  // the way (OrderProblem::EvaluateFrom) starts from.
  std::vector<double> f_end, b_end;
};

// The rank with the longest span (first start to last end) in `tl`.
int CriticalRank(const OrderTimeline& tl);

// Deterministic pseudo-random numbers (splitmix64), the same on every platform.
class SearchRng {
 public:
  explicit SearchRng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  int Uniform(int n);  // in [0, n), n >= 1
  double Real();       // in [0, 1)

 private:
  uint64_t state_;
};

class OrderProblem {
 public:
  // `cost` must outlive the problem and have placement.num_stages() stages.
  OrderProblem(const Placement& placement, int microbatches, const CostModel& cost,
               double memory_limit);

  // Times `orders` (compute actions only) with core::Simulate's rules. nullopt when the orders
  // deadlock or a rank's running memory passes the limit (with the validator's tolerance).
  std::optional<OrderScore> Evaluate(const Orders& orders, OrderTimeline* timeline = nullptr) const;

  // Evaluate for `orders` that differ from the orders `base` times only in actions that start at
  // `from` or later there: every action that starts before `from` in `base` keeps its time (what
  // set it ended earlier still), so only the rest is simulated. Adds the actions it simulated to
  // `*simulated`. `timeline` is required and must not be `base`.
  std::optional<OrderScore> EvaluateFrom(const Orders& orders, const OrderTimeline& base,
                                         double from, OrderTimeline* timeline,
                                         int64_t* simulated) const;

  int64_t actions() const { return actions_; }

  // Ruin and recreate: keeps, on every rank, the actions that start before `cut` in `timeline`
  // (the timeline of `base`; their times depend on nothing later) and schedules the rest anew
  // into `out`, one action at a time: among the next action of each stage and kind on each rank
  // (their order in `base` kept within a stage and kind), whose inputs are timed and whose memory
  // fits, the one with the earliest start plus its duration times its kind's weight plus
  // `jitter` times its duration times a random number in [0, 1). False when none fits (the
  // rest would deadlock). Adds the candidates it looked at to `*checks` (the work it did).
  struct RecreateWeights {
    double f = 0, b = 0, w = 0, jitter = 0;
  };
  bool Recreate(const Orders& base, const OrderTimeline& timeline, double cut,
                const RecreateWeights& weights, SearchRng& rng, Orders* out, int64_t* checks) const;

  // The critical path of `orders` timed as `timeline`: from the last action of the rank with the
  // longest span back to that rank's first start, each action's predecessor is what set its
  // start, the action before it on its rank or an input from another stage. Appends to `arcs`
  // each step of the path between two actions that follow each other on one rank, as
  // (rank, position of the later one), latest first. Only a change on the path can shorten the
  // span: moving the later action of such a step ahead of the earlier one, or the earlier one
  // behind it.
  void CriticalArcs(const Orders& orders, const OrderTimeline& timeline,
                    std::vector<std::pair<int, int>>* arcs) const;

 private:
  // Evaluate and EvaluateFrom (with `base`).
  std::optional<OrderScore> Time(const Orders& orders, const OrderTimeline* base, double from,
                                 OrderTimeline* timeline, int64_t* simulated) const;

  int p_, m_, S_;
  std::vector<int> rank_of_;
  std::vector<double> edge_;  // latency of stage s -> s + 1
  const CostModel* cost_;
  double limit_, tol_;
  int64_t actions_;
};

// Simulated actions a search may spend for `budget_seconds` (0 for a budget <= 0).
int64_t SearchWork(double budget_seconds);

// Improves `orders` (which must evaluate to `score`) in two phases of iterated local search, each
// until its share of `work` simulated actions is spent, the span reaches `span_bound` (nothing
// left to gain), or kMaxRestarts restarts (each after kRestartAfter moves without a strict gain)
// in a row found nothing better. The first half of the work keeps a move only when the score
// does not get worse; the second (with what the first left) runs in kRecreateRounds rounds,
// each from the best plan so far: kRecreateShare of the round's work on ruin and recreate, then
// late acceptance: a move is also kept when its score is no worse than the score
// kLateAcceptance moves earlier, so the search can cross a ridge, and one proposal in
// kSwapOneIn swaps two actions on a rank. `orders` and `score` end at the best plan seen, never
// worse than the input. Deterministic in its arguments.
inline constexpr int kRestartAfter = 6000;
inline constexpr int kMaxRestarts = 8;
inline constexpr int kLateAcceptance = 50;
inline constexpr int kSwapOneIn = 8;
// One proposal in kCriticalOneIn (after the swaps) moves an action along the critical path
// (OrderProblem::CriticalArcs), the only place a move can shorten the span; the others are the
// random moves above, which also cross the plateaus where the span stays. Over seeds 1-3 of the
// ZB and V rows of `zpipe_optimal_table` (both cost models, search budget 1 s) the summed gap to
// the rows' lower bounds fell by 13%, and no row got worse by more than noise.
inline constexpr int kCriticalOneIn = 2;
// Share of the second half's work spent first on ruin and recreate (OrderProblem::Recreate) from
// the best plan, with random cuts and weights; a rebuilt plan is kept when it scores no worse.
inline constexpr double kRecreateShare = 0.5;
inline constexpr double kRecreateFrom = 0.3;  // cuts fall in [kRecreateFrom, 1) of the makespan
// Rounds of the second phase. Where late acceptance settles in a local optimum, a second round
// rebuilds from the best plan with fresh cuts: over 8 seeds of the V rows of
// `zpipe_optimal_table` (p = 4 and 8, both cost models), the summed gap to the best plan any
// seed found fell by 5%, and V-Half p = 8, m = 16 (seed 1) went from 119 to 118.2 (the bound is
// 117.2). Three rounds were worse than one: each gets too little work to settle.
inline constexpr int kRecreateRounds = 2;
void ImproveOrders(const OrderProblem& problem, Orders& orders, OrderScore& score, int64_t work,
                   uint64_t seed, double span_bound = 0);

// Random policy runs a search tries at most, however large its budget.
inline constexpr int64_t kMaxRandomPolicies = 2000;

// Whether `span` is at `bound` (within rounding): no search can shorten it.
inline bool AtBound(double span, double bound) { return span <= bound * (1 + 1e-12); }

}  // namespace zpipe::core::internal

#endif  // ZPIPE_CORE_INTERNAL_ORDER_SEARCH_H_
