#include "coordinator/replanner.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "core/plan.h"

namespace zpipe::coordinator {
namespace {

JobSpec Synthetic(const std::string& schedule, int p, int m, int d = 1) {
  JobSpec spec;
  spec.model = SyntheticConfig{/*forward_ms=*/10, /*backward_ms=*/10, /*weight_ms=*/10,
                               /*activation_kb=*/0, /*params_mb=*/1};
  spec.pipeline = p;
  spec.data = d;
  spec.schedule = schedule;
  spec.microbatches = m;
  spec.iterations = 40;
  return spec;
}

// One iteration's reports as the ranks would measure them running `plan` at `cost` (ms).
IterationSummary SummaryAt(const JobPlan& plan, const core::CostModel& cost, int iteration,
                           int d = 1, int version = 0) {
  IterationSummary s;
  s.iteration = iteration;
  s.duration_s = 0.5;
  for (int dr = 0; dr < d; ++dr) {
    for (int r = 0; r < plan.plan.num_ranks(); ++r) {
      RankStats st;
      st.pipeline_rank = r;
      st.data_rank = dr;
      st.plan_version = version;
      for (const core::Action& a : plan.plan.ranks[r]) {
        const double secs = cost.Duration(a) / 1e3;
        if (a.kind == core::ActionKind::kForward) st.forward_s += secs;
        if (a.kind == core::ActionKind::kBackwardInput) st.backward_s += secs;
        if (a.kind == core::ActionKind::kBackwardFull) st.backward_s += secs;
        if (a.kind == core::ActionKind::kBackwardWeight) st.weight_s += secs;
      }
      s.ranks.push_back(st);
    }
  }
  return s;
}

core::CostModel WTimes(const JobPlan& plan, double factor) {
  core::CostModel c = plan.cost;
  for (core::StageCost& s : c.stages) s.w *= factor;
  return c;
}

TEST(Replanner, MeasuredCostsAsPlannedGiveTheSameBubble) {
  auto plan = PlanJob(Synthetic("zb-2p", 4, 8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ReplanWindow w;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(AddToWindow(w, SummaryAt(**plan, (*plan)->cost, i), 0));
  auto proposal = ProposeReplan(Synthetic("zb-2p", 4, 8), **plan, w);
  ASSERT_TRUE(proposal.ok()) << proposal.status();
  EXPECT_NEAR(proposal->old_bubble, (*plan)->sim.bubble_rate, 1e-9);
  EXPECT_NEAR(proposal->new_bubble, proposal->old_bubble, 1e-9);
  EXPECT_EQ(proposal->plan->version, 1);
  ASSERT_EQ(proposal->costs.size(), 4u);
  EXPECT_NEAR(proposal->costs[2].weight_ms, 10, 1e-9);
}

// W twice as slow as planned: a plan made from the measured costs is never worse at those costs;
// for ZB-V p = 4, m = 8 (the end-to-end test's shape) it is better by over the default threshold
// (0.045 -> 0: the running plan's W no longer fit the cool-down it was placed in).
TEST(Replanner, SlowerWMakesABetterPlan) {
  for (const char* schedule : {"zb-1p", "zb-2p", "zb-v"}) {
    const JobSpec spec = Synthetic(schedule, 4, 8);
    auto plan = PlanJob(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ReplanWindow w;
    for (int i = 10; i < 15; ++i) {
      ASSERT_TRUE(AddToWindow(w, SummaryAt(**plan, WTimes(**plan, 2), i), 0));
    }
    auto proposal = ProposeReplan(spec, **plan, w);
    ASSERT_TRUE(proposal.ok()) << proposal.status();
    std::printf("%s: planned %.4f, at 2x W: running plan %.4f, re-plan %.4f\n", schedule,
                (*plan)->sim.bubble_rate, proposal->old_bubble, proposal->new_bubble);
    EXPECT_LE(proposal->new_bubble, proposal->old_bubble + 1e-9) << schedule;
    EXPECT_NEAR(proposal->costs[0].weight_ms, 2 * (*plan)->cost.stages[0].w, 1e-9) << schedule;
    EXPECT_NE(proposal->reason.find("W 2.00x"), std::string::npos) << proposal->reason;
    // Same shape, so the workers can run it with the stages they have.
    EXPECT_EQ(proposal->plan->plan.num_ranks(), (*plan)->plan.num_ranks());
    EXPECT_EQ(proposal->plan->plan.placement.chunks_per_rank(),
              (*plan)->plan.placement.chunks_per_rank());
    // Synthetic stages keep running the model's own costs.
    EXPECT_EQ(proposal->plan->model_cost.stages[0].w, (*plan)->cost.stages[0].w);
    if (std::string(schedule) == "zb-v") {
      EXPECT_LT(proposal->new_bubble, proposal->old_bubble - 0.01);
      EXPECT_NE(proposal->plan->text, (*plan)->text);
    }
  }
}

TEST(Replanner, WindowTakesOnlyIterationsOfTheCurrentPlan) {
  auto plan = PlanJob(Synthetic("zb-2p", 4, 8));
  ASSERT_TRUE(plan.ok());
  ReplanWindow w;
  EXPECT_FALSE(AddToWindow(w, SummaryAt(**plan, (*plan)->cost, 0, 1, /*version=*/1), 0));
  EXPECT_TRUE(AddToWindow(w, SummaryAt(**plan, (*plan)->cost, 1, 1, 0), 0));
  IterationSummary mixed = SummaryAt(**plan, (*plan)->cost, 2);
  mixed.ranks[3].plan_version = 1;
  EXPECT_FALSE(AddToWindow(w, mixed, 0));
  EXPECT_EQ(w.iterations, 1);
  EXPECT_EQ(w.first_iteration, 1);
}

TEST(Replanner, DataParallelReplicasAreAveraged) {
  const JobSpec spec = Synthetic("zb-1p", 2, 4, /*d=*/2);
  auto plan = PlanJob(spec);
  ASSERT_TRUE(plan.ok());
  IterationSummary s = SummaryAt(**plan, (*plan)->cost, 0, 2);
  for (int g = 2; g < 4; ++g) s.ranks[g].weight_s *= 3;  // replica 1 measures W 3x
  ReplanWindow w;
  ASSERT_TRUE(AddToWindow(w, s, 0));
  auto proposal = ProposeReplan(spec, **plan, w);
  ASSERT_TRUE(proposal.ok()) << proposal.status();
  EXPECT_NEAR(proposal->costs[0].weight_ms, 20, 1e-9);  // (10 + 30) / 2
}

TEST(Replanner, SwitchIterationLeavesTimeToDeliver) {
  EXPECT_EQ(SwitchIteration(9, 1.0), 12);   // at least 3 ahead
  EXPECT_EQ(SwitchIteration(9, 0.01), 60);  // 0.5 s of 10 ms iterations, plus one
}

}  // namespace
}  // namespace zpipe::coordinator
