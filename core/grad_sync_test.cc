#include "core/grad_sync.h"

#include <gtest/gtest.h>

#include "core/lowering.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

Plan Generate(ScheduleKind kind, int p, int m, CostModel* cost_out = nullptr) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = CostModel::Uniform(PlacementFor(kind, p).num_stages(), StageCost{});
  if (cost_out) *cost_out = req.cost;
  auto plan = GenerateSchedule(kind, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(GradSyncTest, ReduceRightAfterLastContribution) {
  Plan plan = Generate(ScheduleKind::k1F1B, 4, 8);
  auto gs = PlanGradSync(plan, GradSyncLayout::Uniform(4, 2));
  ASSERT_TRUE(gs.ok()) << gs.status();
  ASSERT_EQ(gs->buckets.size(), 8u);
  for (int r = 0; r < 4; ++r) {
    const auto& actions = gs->plan.ranks[r];
    // 1F1B's last action on every rank is BW of the last microbatch: both buckets follow it.
    ASSERT_EQ(actions.size(), plan.ranks[r].size() + 2);
    EXPECT_EQ(actions[actions.size() - 3], Action::BW(r, 7));
    EXPECT_EQ(actions[actions.size() - 2], Action::Reduce(0, 0));
    EXPECT_EQ(actions[actions.size() - 1], Action::Reduce(0, 1));
  }
  for (const BucketPlan& b : gs->buckets) EXPECT_EQ(b.expected_contributions, 8);
  EXPECT_TRUE(ValidatePlan(gs->plan).ok());
}

TEST(GradSyncTest, BPhaseBucketsReduceBeforeWPhaseOnes) {
  // Hand-made single-rank plan: B contributions end before the last W.
  Plan plan = EmptyPlan("t", Placement::Linear(1), 2);
  plan.ranks[0] = {Action::F(0, 0), Action::F(0, 1), Action::B(0, 0),
                   Action::B(0, 1), Action::W(0, 0), Action::W(0, 1)};
  GradSyncLayout layout;
  layout.buckets = {
      {BucketSpec{.grads_in_b = false, .grads_in_w = true},
       BucketSpec{.grads_in_b = true, .grads_in_w = false, .contributions_per_microbatch = 3}}};
  auto gs = PlanGradSync(plan, layout);
  ASSERT_TRUE(gs.ok()) << gs.status();
  const std::vector<Action> want = {Action::F(0, 0), Action::F(0, 1),      Action::B(0, 0),
                                    Action::B(0, 1), Action::Reduce(0, 1), Action::W(0, 0),
                                    Action::W(0, 1), Action::Reduce(0, 0)};
  EXPECT_EQ(gs->plan.ranks[0], want);
  EXPECT_EQ(gs->buckets[1].expected_contributions, 6);
  // Reduce of bucket 1 (cost 2) hides under the two W's; bucket 0's is exposed.
  SimOptions opt;
  opt.reduce_cost = 2;
  auto sim = Simulate(gs->plan, CostModel::Uniform(1, StageCost{}), opt);
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->total_reduce, 4);
  EXPECT_DOUBLE_EQ(sim->total_exposed_reduce, 2);
}

TEST(GradSyncTest, OverlapOffPutsEveryReduceAtTheEnd) {
  Plan plan = Generate(ScheduleKind::kGpipe, 2, 4);
  auto on = PlanGradSync(plan, GradSyncLayout::Uniform(2, 3), true);
  auto off = PlanGradSync(plan, GradSyncLayout::Uniform(2, 3), false);
  ASSERT_TRUE(on.ok() && off.ok());
  for (int r = 0; r < 2; ++r) {
    const auto& a = off->plan.ranks[r];
    for (int k = 0; k < 3; ++k) EXPECT_EQ(a[a.size() - 3 + k].kind, ActionKind::kReduce);
  }
}

TEST(GradSyncTest, WorksOnLoweredPlansAndRejectsBadLayouts) {
  Plan plan = *LowerComm(Generate(ScheduleKind::k1F1B, 2, 4));
  auto gs = PlanGradSync(plan, GradSyncLayout::Uniform(2, 1));
  ASSERT_TRUE(gs.ok());
  EXPECT_TRUE(ValidatePlan(gs->plan).ok()) << ValidatePlan(gs->plan);
  EXPECT_FALSE(PlanGradSync(plan, GradSyncLayout::Uniform(3, 1)).ok());
  EXPECT_FALSE(PlanGradSync(gs->plan, GradSyncLayout::Uniform(2, 1)).ok());
  GradSyncLayout empty = GradSyncLayout::Uniform(2, 1);
  empty.buckets[0][0] = BucketSpec{.grads_in_b = false, .grads_in_w = false};
  EXPECT_FALSE(PlanGradSync(plan, empty).ok());
}

}  // namespace
}  // namespace zpipe::core
