#include "core/simulator.h"

#include <gtest/gtest.h>

#include "core/schedule.h"

namespace zpipe::core {
namespace {

Plan Make1F1B(int p, int m) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = CostModel::Uniform(p, StageCost{});
  auto plan = GenerateSchedule(ScheduleKind::k1F1B, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(SimulatorTest, OneF1BUniformClosedForm) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      const StageCost c{.f = 2, .b = 3, .w = 1.5};
      CostModel cost = CostModel::Uniform(p, c);
      auto sim = Simulate(Make1F1B(p, m), cost);
      ASSERT_TRUE(sim.ok()) << sim.status();
      const double t = c.f + c.b + c.w;
      EXPECT_DOUBLE_EQ(sim->span, (m + p - 1) * t) << "p=" << p << " m=" << m;
      for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(sim->idle[r], (p - 1) * t);
      EXPECT_NEAR(sim->bubble_rate, (p - 1.0) / (m + p - 1.0), 1e-12);
    }
  }
}

// GPipe p=2, m=1 with F = B = W = 1 and T_comm = 0.5: F0 | comm | F1 BW1 | comm | BW0.
ScheduleRequest GpipeTwoRanksOneMicrobatch() {
  ScheduleRequest req;
  req.pipeline = 2;
  req.microbatches = 1;
  req.cost = CostModel::Uniform(2, StageCost{.f = 1, .b = 1, .w = 1}, /*comm=*/0.5);
  return req;
}

TEST(SimulatorTest, CommChargedOnCrossRankEdges) {
  const ScheduleRequest req = GpipeTwoRanksOneMicrobatch();
  auto plan = GenerateSchedule(ScheduleKind::kGpipe, req);
  ASSERT_TRUE(plan.ok());
  auto sim = Simulate(*plan, req.cost);
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->span, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  EXPECT_DOUBLE_EQ(sim->timings[1][0].start, 1.5);
}

TEST(SimulatorTest, ReplayedDurationsReplaceTheCostModel) {
  // The replay makes F0 take 4 instead of 1 and rank 1's BW take 0.25.
  const ScheduleRequest req = GpipeTwoRanksOneMicrobatch();
  auto plan = GenerateSchedule(ScheduleKind::kGpipe, req);
  ASSERT_TRUE(plan.ok());
  std::vector<std::vector<double>> durations(2);
  for (int r = 0; r < 2; ++r) {
    for (const Action& a : plan->ranks[r]) durations[r].push_back(req.cost.Duration(a));
  }
  SimOptions options;
  options.action_durations = &durations;
  auto same = Simulate(*plan, req.cost, options);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_DOUBLE_EQ(same->span, 1 + 0.5 + 1 + 2 + 0.5 + 2);  // the cost model's own durations

  durations[0][0] = 4;  // F0
  for (size_t k = 0; k < plan->ranks[1].size(); ++k) {
    if (plan->ranks[1][k].kind == ActionKind::kBackwardFull) durations[1][k] = 0.25;
  }
  auto replay = Simulate(*plan, req.cost, options);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_DOUBLE_EQ(replay->timings[1][0].start, 4.5);  // F1 after the longer F0 and T_comm
  EXPECT_DOUBLE_EQ(replay->span, 4 + 0.5 + 1 + 0.25 + 0.5 + 2);
  EXPECT_DOUBLE_EQ(replay->busy[1], 1.25);

  durations[1].pop_back();
  auto short_list = Simulate(*plan, req.cost, options);
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find("action durations of rank 1"), std::string::npos)
      << short_list.status();
  durations[1].push_back(0);
  durations[0][0] = -1;
  auto negative = Simulate(*plan, req.cost, options);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("has duration -1"), std::string::npos)
      << negative.status();
}

TEST(SimulatorTest, PeakMemoryFollowsOrder) {
  const int p = 4, m = 8;
  CostModel cost = CostModel::Uniform(p, StageCost{.mem_f = 2, .mem_b = -0.5, .mem_w = -1.5});
  auto sim = Simulate(Make1F1B(p, m), cost);
  ASSERT_TRUE(sim.ok());
  for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(sim->peak_memory[r], 2.0 * (p - r));
}

TEST(SimulatorTest, DeadlockNamesBlockedActions) {
  Plan plan = EmptyPlan("bad", Placement::Linear(2), 1);
  // Rank 0 wants the backward before it ran its forward's successor: a cycle.
  plan.ranks[0] = {Action::BW(0, 0), Action::F(0, 0)};
  plan.ranks[1] = {Action::F(1, 0), Action::BW(1, 0)};
  auto sim = Simulate(plan, CostModel::Uniform(2, StageCost{}));
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(sim.status().message().find("deadlock"), std::string::npos);
  EXPECT_NE(sim.status().message().find("rank 0 at #0 'BW s0 mb0'"), std::string::npos)
      << sim.status();
  EXPECT_NE(sim.status().message().find("rank 1 at #0 'F s1 mb0' waits for F s0 mb0"),
            std::string::npos)
      << sim.status();
}

TEST(SimulatorTest, MissingDependencyIsAnError) {
  Plan plan = EmptyPlan("bad", Placement::Linear(2), 1);
  plan.ranks[0] = {Action::F(0, 0)};
  plan.ranks[1] = {Action::F(1, 0), Action::BW(1, 0)};
  auto sim = Simulate(plan, CostModel::Uniform(2, StageCost{}));
  ASSERT_TRUE(sim.ok()) << "BW s1 needs only F s1 (last stage)";
  plan.ranks[0].push_back(Action::W(0, 0));
  sim = Simulate(plan, CostModel::Uniform(2, StageCost{}));
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("depends on 'B s0 mb0'"), std::string::npos)
      << sim.status();
}

TEST(SimulatorTest, OutOfRangeActionsAreRejected) {
  Plan plan = EmptyPlan("bad", Placement::Linear(2), 1);
  plan.ranks[0] = {Action::F(1, 0)};
  auto sim = Simulate(plan, CostModel::Uniform(2, StageCost{}));
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("belongs on rank 1"), std::string::npos);
  plan.ranks[0] = {Action::F(0, 5)};
  EXPECT_FALSE(Simulate(plan, CostModel::Uniform(2, StageCost{})).ok());
}

TEST(SimulatorTest, ReduceOverlapAndExposure) {
  // One rank: F, B, REDUCE, W with reduce cost 3 and W taking 2: 2 of 3 hidden by W.
  Plan plan = EmptyPlan("t", Placement::Linear(1), 1);
  plan.ranks[0] = {Action::F(0, 0), Action::B(0, 0), Action::Reduce(0, 0), Action::W(0, 0)};
  CostModel cost = CostModel::Uniform(1, StageCost{.f = 1, .b = 1, .w = 2});
  SimOptions options;
  options.reduce_cost = 3;
  auto sim = Simulate(plan, cost, options);
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->timings[0][2].start, 2);
  EXPECT_DOUBLE_EQ(sim->timings[0][2].end, 5);
  EXPECT_DOUBLE_EQ(sim->total_reduce, 3);
  EXPECT_DOUBLE_EQ(sim->total_exposed_reduce, 1);
  EXPECT_NEAR(sim->reduce_overlap, 2.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(sim->span, 5);
}

TEST(SimulatorTest, ReleaseDuringWIssuesEachBucketAtItsShareOfTheLastW) {
  // One rank, one stage, a W of 4 and four buckets after it. At the action's end all four would be
  // exposed; released during W, bucket k is issued at (k + 1) / 4 of the W, so with reduce cost 1
  // only the last one sticks out.
  Plan plan = EmptyPlan("t", Placement::Linear(1), 1);
  plan.ranks[0] = {Action::F(0, 0),      Action::B(0, 0),      Action::W(0, 0),
                   Action::Reduce(0, 0), Action::Reduce(0, 1), Action::Reduce(0, 2),
                   Action::Reduce(0, 3)};
  CostModel cost = CostModel::Uniform(1, StageCost{.f = 1, .b = 1, .w = 4});
  SimOptions options;
  options.reduce_cost = 1;
  auto at_end = Simulate(plan, cost, options);
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_DOUBLE_EQ(at_end->timings[0][3].start, 6);
  EXPECT_DOUBLE_EQ(at_end->total_exposed_reduce, 4);
  EXPECT_DOUBLE_EQ(at_end->reduce_overlap, 0);

  options.release_during_w = true;
  auto during = Simulate(plan, cost, options);
  ASSERT_TRUE(during.ok()) << during.status();
  for (int k = 0; k < 4; ++k) {
    EXPECT_DOUBLE_EQ(during->timings[0][3 + k].start, 3 + k) << "bucket " << k;
    EXPECT_DOUBLE_EQ(during->timings[0][3 + k].end, 4 + k) << "bucket " << k;
  }
  EXPECT_DOUBLE_EQ(during->total_exposed_reduce, 1);
  EXPECT_DOUBLE_EQ(during->reduce_overlap, 0.75);
  EXPECT_DOUBLE_EQ(during->span, 7);

  // A BW releases during its W part only (after T_B); a REDUCE after F or B is not affected.
  plan.ranks[0] = {Action::F(0, 0), Action::BW(0, 0), Action::Reduce(0, 0), Action::Reduce(0, 1)};
  auto bw = Simulate(plan, cost, options);
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_DOUBLE_EQ(bw->timings[0][2].start, 4);  // BW runs 1..6, its W part 2..6
  EXPECT_DOUBLE_EQ(bw->timings[0][3].start, 6);
  plan.ranks[0] = {Action::F(0, 0), Action::B(0, 0), Action::Reduce(0, 0), Action::W(0, 0)};
  auto after_b = Simulate(plan, cost, options);
  ASSERT_TRUE(after_b.ok()) << after_b.status();
  EXPECT_DOUBLE_EQ(after_b->timings[0][2].start, 2);
}

}  // namespace
}  // namespace zpipe::core
