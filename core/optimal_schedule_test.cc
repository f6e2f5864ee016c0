#include "core/optimal_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/planning.h"
#include "core/rank_bound.h"
#include "core/simulator.h"
#include "core/span_bound.h"
#include "core/testing/unit_request.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

// A rank's compute actions for one microbatch, in an order that respects their dependencies
// (forwards up the stages, backwards down, each W after its B).
std::vector<Action> RankActionsOf(const Placement& pl, int r, int i, bool split) {
  std::vector<int> stages;
  for (int s = 0; s < pl.num_stages(); ++s) {
    if (pl.RankOf(s) == r) stages.push_back(s);
  }
  std::vector<Action> out;
  for (int s : stages) out.push_back(Action::F(s, i));
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    out.push_back(split ? Action::B(*it, i) : Action::BW(*it, i));
    if (split) out.push_back(Action::W(*it, i));
  }
  return out;
}

// One microbatch at a time: valid under any limit that holds one microbatch, and slow.
Plan SerialPlan(const Placement& pl, int m, bool split) {
  Plan plan = EmptyPlan("serial", pl, m);
  for (int i = 0; i < m; ++i) {
    for (int r = 0; r < pl.num_ranks(); ++r) {
      for (const Action& a : RankActionsOf(pl, r, i, split)) plan.ranks[r].push_back(a);
    }
  }
  return plan;
}

// Whether `a` may come next on its rank given what is already in `prefix`: its same-rank inputs
// (its F before its B, its B before its W, a same-rank neighbour stage first) are there.
bool LocallyReady(const Placement& pl, const std::vector<Action>& prefix, const Action& a) {
  auto has = [&](ActionKind k, int s) {
    for (const Action& x : prefix) {
      if (x.kind == k && x.stage == s && x.microbatch == a.microbatch) return true;
    }
    return false;
  };
  const int S = pl.num_stages();
  switch (a.kind) {
    case ActionKind::kForward:
      return a.stage == 0 || pl.RankOf(a.stage - 1) != pl.RankOf(a.stage) ||
             has(ActionKind::kForward, a.stage - 1);
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardFull:
      return has(ActionKind::kForward, a.stage) &&
             (a.stage + 1 == S || pl.RankOf(a.stage + 1) != pl.RankOf(a.stage) ||
              has(a.kind, a.stage + 1));
    case ActionKind::kBackwardWeight:
      return has(ActionKind::kBackwardInput, a.stage);
    default:
      return false;
  }
}

// Every order of a rank's actions that respects its own same-rank dependencies.
std::vector<std::vector<Action>> RankOrders(const Placement& pl, int r, int m, bool split) {
  std::vector<Action> all;
  for (int i = 0; i < m; ++i) {
    for (const Action& a : RankActionsOf(pl, r, i, split)) all.push_back(a);
  }
  std::vector<std::vector<Action>> out;
  std::vector<Action> prefix;
  std::vector<bool> used(all.size(), false);
  std::function<void()> rec = [&] {
    if (prefix.size() == all.size()) {
      out.push_back(prefix);
      return;
    }
    for (size_t k = 0; k < all.size(); ++k) {
      if (used[k] || !LocallyReady(pl, prefix, all[k])) continue;
      used[k] = true;
      prefix.push_back(all[k]);
      rec();
      prefix.pop_back();
      used[k] = false;
    }
  };
  rec();
  return out;
}

// The least span over every valid plan (all order combinations, validated and simulated):
// the brute-force oracle, independent of the solver. +inf when none is valid.
double BruteForceOptimum(const Placement& pl, int m, const CostModel& cost, double limit,
                         bool split, int64_t* valid_count = nullptr) {
  std::vector<std::vector<std::vector<Action>>> per_rank;
  for (int r = 0; r < pl.num_ranks(); ++r) per_rank.push_back(RankOrders(pl, r, m, split));
  Plan plan = EmptyPlan("brute", pl, m);
  double best = std::numeric_limits<double>::infinity();
  int64_t valid = 0;
  const ValidateOptions vopts{.cost = &cost, .memory_limit = limit};
  std::function<void(int)> rec = [&](int r) {
    if (r == pl.num_ranks()) {
      if (!ValidatePlan(plan, vopts).ok()) return;
      absl::StatusOr<SimResult> sim = Simulate(plan, cost);
      if (!sim.ok()) return;
      ++valid;
      best = std::min(best, sim->span);
      return;
    }
    for (const auto& order : per_rank[r]) {
      plan.ranks[r] = order;
      rec(r + 1);
    }
  };
  rec(0);
  if (valid_count != nullptr) *valid_count = valid;
  return best;
}

struct Case {
  std::string name;
  Placement placement;
  int m;
  CostModel cost;
  double limit;
  bool split;
};

CostModel RandomCost(int stages, uint32_t seed, double comm) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> time(0.5, 2.0);
  CostModel cost;
  cost.comm = comm;
  for (int s = 0; s < stages; ++s) {
    const double mf = 1;
    cost.stages.push_back(StageCost{.f = time(rng), .b = time(rng), .w = time(rng),
                                    .mem_f = mf, .mem_b = -0.5, .mem_w = -0.5});
  }
  return cost;
}

std::vector<Case> TinyCases() {
  const StageCost unit{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = 0, .mem_w = -1};
  const Placement lin2 = Placement::Linear(2), lin3 = Placement::Linear(3);
  const Placement v2 = Placement::VShape(2);
  return {
      {"zb p2 m2 unit", lin2, 2, CostModel::Uniform(2, unit), 2, true},
      {"zb p2 m2 limit 1", lin2, 2, CostModel::Uniform(2, unit), 1, true},
      {"zb p2 m2 comm", lin2, 2, CostModel::Uniform(2, unit, 0.7), 2, true},
      {"zb p2 m2 random", lin2, 2, RandomCost(2, 7, 0.3), 2, true},
      {"zb p2 m2 w=0", lin2, 2, CostModel::Uniform(2, {.f = 1, .b = 2, .w = 0}), 2, true},
      {"zb p3 m2 random", lin3, 2, RandomCost(3, 11, 0.2), 2, true},
      {"zb p3 m2 random tight", lin3, 2, RandomCost(3, 12, 0.5), 1.5, true},
      {"fused p2 m3 unit", lin2, 3, CostModel::Uniform(2, unit), 2, false},
      {"fused p2 m3 random", lin2, 3, RandomCost(2, 5, 0.4), 3, false},
      {"fused p3 m2 comm", lin3, 2, CostModel::Uniform(3, unit, 0.25), 3, false},
      // The memory-time part of SpanLowerBound is the larger here (20 against 19).
      {"fused p2 m3 comm limit 1", lin2, 3, CostModel::Uniform(2, unit, 1), 1, false},
      {"v p2 m1 random", v2, 1, RandomCost(4, 3, 0.3), 4, true},
  };
}

// The solver on a plan with `options`, and with the same options but no relaxations at the
// tree's nodes.
std::pair<absl::StatusOr<OptimalResult>, absl::StatusOr<OptimalResult>> SolveWithAndWithout(
    const PlannedSchedule& plan, const OptimalOptions& options) {
  OptimalOptions off = options;
  off.rank_relaxation_at_nodes = false;
  return {SolveOptimal(plan.plan, plan.cost, plan.memory_limit, options),
          SolveOptimal(plan.plan, plan.cost, plan.memory_limit, off)};
}

TEST(OptimalScheduleTest, MatchesBruteForceOnTinyShapes) {
  for (const Case& c : TinyCases()) {
    SCOPED_TRACE(c.name);
    int64_t valid = 0;
    const double brute = BruteForceOptimum(c.placement, c.m, c.cost, c.limit, c.split, &valid);
    ASSERT_GT(valid, 0);
    const Plan serial = SerialPlan(c.placement, c.m, c.split);
    absl::StatusOr<OptimalResult> r =
        SolveOptimal(serial, c.cost, c.limit, {.time_limit_seconds = 0, .node_limit = 0});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->optimal);
    EXPECT_NEAR(r->span, brute, 1e-9 * brute) << "over " << valid << " valid plans";
    EXPECT_NEAR(r->bound, r->span, 1e-12 * brute);
    EXPECT_NEAR(r->gap(), 0, 1e-12);
    // The plan it returns is valid and simulates to the span it reports.
    EXPECT_TRUE(ValidatePlan(r->plan, {.cost = &c.cost, .memory_limit = c.limit}).ok());
    absl::StatusOr<SimResult> sim = Simulate(r->plan, c.cost);
    ASSERT_TRUE(sim.ok());
    EXPECT_DOUBLE_EQ(sim->span, r->span);
    // It improves the serial incumbent exactly when the serial plan is not optimal.
    absl::StatusOr<SimResult> serial_sim = Simulate(serial, c.cost);
    ASSERT_TRUE(serial_sim.ok());
    EXPECT_EQ(r->improved, serial_sim->span > brute * (1 + 1e-12));
    // The static bounds hold for every valid order.
    EXPECT_LE(SpanLowerBound(c.placement, c.m, c.cost, c.limit, c.split), brute * (1 + 1e-12));
    const RankBound ranks = RankRelaxationBound(c.placement, c.m, c.cost, c.limit, c.split);
    EXPECT_EQ(ranks.ranks_solved, c.placement.num_ranks());
    EXPECT_LE(ranks.span, brute * (1 + 1e-12));
  }
}

// With one rank the per-rank relaxation is the problem itself: its bound is the optimum.
TEST(OptimalScheduleTest, RankRelaxationIsExactOnOneRank) {
  const Placement one = Placement::Linear(1);
  int cases = 0;
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (bool split : {true, false}) {
      for (double limit : {1.0, 1.5, 2.0, 3.0}) {
        const CostModel cost = RandomCost(1, seed, 0);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " split " << split << " limit "
                                          << limit);
        const double brute = BruteForceOptimum(one, 3, cost, limit, split);
        if (!std::isfinite(brute)) continue;
        ++cases;
        const RankBound ranks = RankRelaxationBound(one, 3, cost, limit, split);
        EXPECT_EQ(ranks.ranks_solved, 1);
        EXPECT_NEAR(ranks.span, brute, 1e-9 * brute);
      }
    }
  }
  EXPECT_GE(cases, 12);
}

TEST(OptimalScheduleTest, CutOffSearchReportsABoundThatHolds) {
  int cut_off = 0;
  for (const Case& c : TinyCases()) {
    SCOPED_TRACE(c.name);
    const double brute = BruteForceOptimum(c.placement, c.m, c.cost, c.limit, c.split);
    absl::StatusOr<OptimalResult> r =
        SolveOptimal(SerialPlan(c.placement, c.m, c.split), c.cost, c.limit,
                     {.time_limit_seconds = 0, .node_limit = 3});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->bound, brute * (1 + 1e-12));
    EXPECT_GE(r->span, brute * (1 - 1e-12));
    if (r->optimal) {
      // Proven within 3 nodes (the static bound meets the incumbent): then it is the optimum.
      EXPECT_NEAR(r->span, brute, 1e-9 * brute);
    } else {
      ++cut_off;
      EXPECT_GT(r->gap(), 0);
    }
  }
  EXPECT_GE(cut_off, 8);  // most tiny shapes need more than 3 nodes
}

// A search cut off after its plain phase raises the proven bound pass by pass (IDA*). ZB-2p at
// p = 3, m = 6, T_comm = 0.1: SpanLowerBound and the per-rank relaxation say 18, the optimum is
// 18.2. With a little more than the nodes the plain search needs for the proof, split in two
// phases, neither finishes, and the deepening proves more than 18 (the plain phase alone proves
// only the root's bound) and never more than the optimum.
TEST(OptimalScheduleTest, CutOffSearchProvesMoreThanTheStaticBound) {
  PlanRequest req = UnitRequest("zb-2p", 3, 6);
  req.optimal = OptimalOptions{.time_limit_seconds = 0, .node_limit = 0};
  absl::StatusOr<PlannedSchedule> exact = PlanSchedule(req);
  ASSERT_TRUE(exact.ok()) << exact.status();
  ASSERT_TRUE(exact->optimal->optimal);
  EXPECT_NEAR(exact->optimal->span, 18.2, 1e-9);
  EXPECT_NEAR(SpanLowerBound(exact->plan.placement, 6, exact->cost, exact->memory_limit, true),
              18, 1e-9);
  EXPECT_NEAR(RankRelaxationBound(exact->plan.placement, 6, exact->cost, exact->memory_limit, true)
                  .span,
              18, 1e-9);

  req.optimal->node_limit = exact->optimal->nodes * 6 / 5;
  absl::StatusOr<PlannedSchedule> cut = PlanSchedule(req);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_FALSE(cut->optimal->optimal);
  EXPECT_GT(cut->optimal->bound, 18 + 1e-9);
  EXPECT_LE(cut->optimal->bound, 18.2 + 1e-9);
}

TEST(OptimalScheduleTest, RefusesALoweredOrInvalidIncumbent) {
  const Placement pl = Placement::Linear(2);
  const CostModel cost = CostModel::Uniform(2, StageCost{});
  Plan plan = SerialPlan(pl, 2, true);
  // Over the limit: the serial plan needs one microbatch of memory.
  absl::StatusOr<OptimalResult> r = SolveOptimal(plan, cost, 0.5, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  plan.ranks[0].push_back(Action::Comm(ActionKind::kSendAct, 0, 0, 1));
  r = SolveOptimal(plan, cost, 2, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

// Through the planning pipeline: the solver's plan is lowered, validated and simulated like any
// other. 1F1B at p = 4, m = 4 with T_comm = 0.1 spans 22; another order under the same memory
// limit spans 21.6, and the solver proves it optimal.
TEST(OptimalScheduleTest, PlanScheduleRunsTheSolversPlanThroughThePipeline) {
  PlanRequest req = UnitRequest("1f1b", 4, 4);
  req.lower = true;  // through the whole chain
  req.optimal = OptimalOptions{.time_limit_seconds = 0, .node_limit = 1'000'000};
  absl::StatusOr<PlannedSchedule> p = PlanSchedule(req);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->optimal.has_value());
  EXPECT_TRUE(p->optimal->optimal);
  EXPECT_DOUBLE_EQ(p->optimal->incumbent_span, 22);
  EXPECT_NEAR(p->optimal->span, 21.6, 1e-9);
  EXPECT_TRUE(p->plan.IsLowered());
  EXPECT_NEAR(p->sim.span, 21.6, 1e-9);
  EXPECT_NEAR(p->span_lower_bound, 21.6, 1e-9);
}

// Random stage costs for the random-shape tests: F, B and W each 0.2-1.5 in tenths (from `seed`),
// T_comm `comm`, the ZB paper's memory deltas.
std::function<PlanInputs(const Placement&)> RandomTenthsInputs(uint32_t seed, double comm) {
  return [seed, comm](const Placement& pl) {
    std::mt19937 costs(seed);
    std::uniform_real_distribution<double> time(0.2, 1.5);
    auto tenths = [&] { return std::round(time(costs) * 10) / 10; };
    PlanInputs in;
    in.cost.comm = comm;
    for (int s = 0; s < pl.num_stages(); ++s) {
      in.cost.stages.push_back(StageCost{.f = tenths(), .b = tenths(), .w = tenths(),
                                         .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5});
    }
    return in;
  };
}

// The node bound that asks each rank's relaxation from the node's state (on by default) cuts
// only what cannot be shorter, and the relaxation's root bound (its chains included) never
// exceeds the optimum: on a few hundred small shapes of every placement, with random
// costs rounded to tenths (so that equal times arise, as they do with real costs) and T_comm
// 0, 0.15 or 0.3, the solver finds the same optimum with it as without (whose optimum the
// brute-force test above checks), in fewer nodes. A relaxation that over-estimates (it once
// lifted a finished rank's end to the latest start) fails here.
TEST(OptimalScheduleTest, RankRelaxationAtNodesKeepsTheOptimum) {
  std::mt19937 rng(11);
  const char* schedules[] = {"1f1b", "zb-h1", "zb-1p", "zb-2p", "zb-v", "v-half", "interleaved"};
  int cases = 0, tight = 0, pairs = 0;
  int64_t nodes_on = 0, nodes_off = 0;
  for (int trial = 0; trial < 700; ++trial) {
    const std::string schedule = schedules[trial % std::size(schedules)];
    const bool two_chunks = schedule == "zb-v" || schedule == "v-half" || schedule == "interleaved";
    PlanRequest req;
    req.schedule = schedule;
    req.pipeline = two_chunks ? 2 : 2 + rng() % 2;
    req.microbatches = schedule == "interleaved" ? 2 : two_chunks ? 2 + rng() % 2 : 2 + rng() % 3;
    req.lower = false;
    const uint32_t seed = rng();
    const double comm = 0.15 * (rng() % 3);
    req.inputs = RandomTenthsInputs(seed, comm);
    absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
    ASSERT_TRUE(plan.ok()) << plan.status();
    SCOPED_TRACE(::testing::Message() << schedule << " p " << req.pipeline << " m "
                                      << req.microbatches << " seed " << seed << " comm " << comm);
    const auto [with, without] =
        SolveWithAndWithout(*plan, {.time_limit_seconds = 0, .node_limit = 2'000'000});
    ASSERT_TRUE(with.ok()) << with.status();
    ASSERT_TRUE(without.ok()) << without.status();
    if (!without->optimal) continue;
    ++cases;
    EXPECT_TRUE(with->optimal);
    EXPECT_NEAR(with->span, without->span, 1e-9);
    // The relaxation's bound, chains and the pairs of ranks included, holds: no plan is
    // shorter than it.
    const RankBound bound = RankRelaxationBound(plan->plan.placement, req.microbatches,
                                                plan->cost, plan->memory_limit,
                                                schedule != "1f1b", {.node_limit = 5'000'000});
    EXPECT_LE(bound.span, without->span * (1 + 1e-12));
    EXPECT_LE(plan->span_lower_bound, without->span * (1 + 1e-12));
    tight += bound.span >= without->span * (1 - 1e-12);
    pairs += bound.pairs_solved > 0;
    nodes_on += with->nodes;
    nodes_off += without->nodes;
  }
  EXPECT_GE(cases, 600);
  EXPECT_LT(nodes_on, nodes_off);
  EXPECT_GE(tight, cases / 2);  // and it is the optimum itself on most of these small shapes
  EXPECT_GE(pairs, cases / 2);  // (a pair settled, so its bound was in the maximum)
}

// The memory limit's release times (RankBoundOptions::memory_releases: a stage's i-th F waits for
// the B of microbatch i - L / M_F, and on a V's ranks for the F at the turn of microbatch
// i - (L - M_F) / M_F) are a bound only: under limits tighter than the schedules' own, where they
// bind from the second microbatch on, the relaxation with them never exceeds the optimum the tree
// proves without any relaxation, and they do change the search on a quarter of the shapes (and
// on a fifth of the V shapes).
TEST(OptimalScheduleTest, MemoryReleasesKeepTheOptimumUnderTightLimits) {
  std::mt19937 rng(5);
  const char* schedules[] = {"1f1b", "zb-h1", "zb-1p", "zb-2p", "v-half", "zb-v"};
  int cases = 0, changed = 0, v_cases = 0, v_changed = 0;
  for (int trial = 0; trial < 180; ++trial) {
    const std::string schedule = schedules[trial % std::size(schedules)];
    const bool v = schedule == "v-half" || schedule == "zb-v";
    PlanRequest req;
    req.schedule = schedule;
    req.pipeline = v ? 2 : 2 + rng() % 2;
    req.microbatches = v ? 3 + rng() % 2 : 4 + rng() % 3;
    req.lower = false;
    // Rank 0 holds one microbatch per stage it has, and at most one more.
    req.memory_limit = (v ? 2 : 1) + rng() % 2;
    const uint32_t seed = rng();
    const double comm = 0.15 * (rng() % 3);
    req.inputs = RandomTenthsInputs(seed, comm);
    absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
    if (!plan.ok()) continue;  // no plan of this schedule fits so little memory
    SCOPED_TRACE(::testing::Message() << schedule << " p " << req.pipeline << " m "
                                      << req.microbatches << " limit " << *req.memory_limit
                                      << " seed " << seed << " comm " << comm);
    OptimalOptions exact{.time_limit_seconds = 0, .node_limit = 2'000'000};
    exact.rank_relaxation_at_nodes = false;
    absl::StatusOr<OptimalResult> optimum =
        SolveOptimal(plan->plan, plan->cost, plan->memory_limit, exact);
    ASSERT_TRUE(optimum.ok()) << optimum.status();
    if (!optimum->optimal) continue;
    ++cases;
    auto bound = [&](bool releases) {
      return RankRelaxationBound(plan->plan.placement, req.microbatches, plan->cost,
                                 plan->memory_limit, schedule != "1f1b",
                                 {.node_limit = 5'000'000, .memory_releases = releases});
    };
    const RankBound with = bound(true), without = bound(false);
    EXPECT_LE(with.span, optimum->span * (1 + 1e-12));
    // And the units' bounds at their first states (what every plan's span_lower_bound has).
    EXPECT_LE(RankRootBound(plan->plan.placement, req.microbatches, plan->cost,
                            plan->memory_limit, schedule != "1f1b"),
              optimum->span * (1 + 1e-12));
    EXPECT_LE(plan->span_lower_bound, optimum->span * (1 + 1e-12));
    changed += with.nodes != without.nodes || with.span != without.span;
    v_cases += v;
    v_changed += v && (with.nodes != without.nodes || with.span != without.span);
  }
  EXPECT_GE(cases, 100);
  EXPECT_GE(changed, cases / 4);      // 46 of 156
  EXPECT_GE(v_changed, v_cases / 6);  // 12 of 59 ZB-V and V-Half shapes
}

// Where memory and the round trip decide, the relaxation at the nodes settles what the tree
// alone cannot: 1F1B at p = 4, m = 8, T_comm = 0.1 spans 34.6 and no order is shorter. The
// root's bound says 34.2; with it the proof takes about 8 thousand nodes (17 thousand with each
// rank's relaxation alone, without the chains through the ranks), without it 30 million.
TEST(OptimalScheduleTest, RankRelaxationAtNodesProves1F1BAtFourRanksEightMicrobatches) {
  PlanRequest req = UnitRequest("1f1b", 4, 8);
  absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto [with, without] =
      SolveWithAndWithout(*plan, {.time_limit_seconds = 0, .node_limit = 200'000});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_TRUE(with->optimal);
  EXPECT_NEAR(with->span, 34.6, 1e-9);
  EXPECT_NEAR(with->bound, 34.6, 1e-9);
  EXPECT_LT(with->nodes, 12'000);
  EXPECT_FALSE(without->optimal);
  EXPECT_LT(without->bound, 34.6 - 0.1);
}

// Neighbourhood rounds (OptimalOptions::neighbourhood_nodes) keep the best plan's first actions
// and search every completion: V-Half at p = 4, m = 8, searched with seed 1 to 55, is shortened
// to 54.8, the optimum, where the tree from the root finds nothing in as many nodes.
// The incumbent's microbatch labels do not matter: renamed (stage 0's Fs in reverse, so the tree
// could not replay it as given), it gives the same plan in the same nodes.
TEST(OptimalScheduleTest, NeighbourhoodRoundsShortenWhatTheTreeFromTheRootDoesNot) {
  PlanRequest req = UnitRequest("v-half", 4, 8);
  req.search = {.budget_seconds = 1, .seed = 1};
  req.polish = false;
  absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_NEAR(plan->sim.span, 55, 1e-9);
  auto solve = [&](const Plan& incumbent, int64_t neighbourhood) {
    return SolveOptimal(incumbent, plan->cost, plan->memory_limit,
                        {.time_limit_seconds = 0,
                         .node_limit = 1000,
                         .neighbourhood_nodes = neighbourhood});
  };
  // As many nodes as the rounds and the search after them take, all from the root.
  absl::StatusOr<OptimalResult> from_root =
      SolveOptimal(plan->plan, plan->cost, plan->memory_limit,
                   {.time_limit_seconds = 0, .node_limit = 111'000});
  absl::StatusOr<OptimalResult> rounds = solve(plan->plan, 110'000);
  ASSERT_TRUE(from_root.ok() && rounds.ok());
  EXPECT_FALSE(from_root->improved);
  EXPECT_TRUE(rounds->improved);
  EXPECT_NEAR(rounds->span, 54.8, 1e-9);
  EXPECT_LE(rounds->bound, 54.8 + 1e-9);  // the rounds find the optimum but need not prove it
  const ValidateOptions vopts{.cost = &plan->cost, .memory_limit = plan->memory_limit};
  EXPECT_TRUE(ValidatePlan(rounds->plan, vopts).ok());

  const int m = plan->plan.num_microbatches;
  Plan renamed = plan->plan;
  for (auto& rank : renamed.ranks) {
    for (Action& a : rank) a.microbatch = m - 1 - a.microbatch;
  }
  ASSERT_TRUE(ValidatePlan(renamed, vopts).ok());
  absl::StatusOr<OptimalResult> from_renamed = solve(renamed, 110'000);
  ASSERT_TRUE(from_renamed.ok()) << from_renamed.status();
  EXPECT_EQ(from_renamed->plan, rounds->plan);
  EXPECT_EQ(from_renamed->nodes, rounds->nodes);
}

}  // namespace
}  // namespace zpipe::core
