#include "coordinator/measured_bubble.h"

#include <gtest/gtest.h>

#include "core/simulator.h"

namespace zpipe::coordinator {
namespace {

JobSpec Synthetic(const std::string& schedule, int p, int m, int d = 1) {
  JobSpec spec;
  spec.model = SyntheticConfig{/*forward_ms=*/10, /*backward_ms=*/10, /*weight_ms=*/8,
                               /*activation_kb=*/0, /*params_mb=*/1};
  spec.pipeline = p;
  spec.data = d;
  spec.schedule = schedule;
  spec.microbatches = m;
  spec.iterations = 1;
  return spec;
}

// Reports that measured exactly `cost` (ms) on every rank of one replica: each rank's busy time
// by op is what its plan's actions take at those costs.
std::vector<RankStats> ReportsAt(const JobPlan& plan, const core::CostModel& cost, int d = 1) {
  std::vector<RankStats> out;
  for (int dr = 0; dr < d; ++dr) {
    for (int r = 0; r < plan.plan.num_ranks(); ++r) {
      RankStats s;
      s.pipeline_rank = r;
      s.data_rank = dr;
      for (const core::Action& a : plan.plan.ranks[r]) {
        const double secs = cost.Duration(a) / 1e3;
        switch (a.kind) {
          case core::ActionKind::kForward:
            s.forward_s += secs;
            break;
          case core::ActionKind::kBackwardInput:
          case core::ActionKind::kBackwardFull:
            s.backward_s += secs;
            break;
          case core::ActionKind::kBackwardWeight:
            s.weight_s += secs;
            break;
          default:
            break;
        }
      }
      out.push_back(s);
    }
  }
  return out;
}

TEST(MeasuredBubble, PlannedCostsReproduceThePlannedBubble) {
  for (const char* schedule : {"zb-h1", "zb-v", "1f1b"}) {
    auto plan = PlanJob(Synthetic(schedule, 4, 8));
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto predicted = PredictBubbleAtMeasuredCosts(**plan, ReportsAt(**plan, (*plan)->cost));
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    EXPECT_NEAR(predicted->job, (*plan)->sim.bubble_rate, 1e-9) << schedule;
    ASSERT_EQ(predicted->ranks.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_NEAR(predicted->ranks[r], (*plan)->sim.rank_bubble[r], 1e-9) << schedule << " " << r;
    }
  }
}

TEST(MeasuredBubble, UsesTheMeasuredCostsPerRank) {
  auto plan = PlanJob(Synthetic("zb-h1", 4, 8));
  ASSERT_TRUE(plan.ok());
  // Rank 2 measured twice the planned W time; the others as planned.
  core::CostModel measured = (*plan)->cost;
  measured.stages[2].w *= 2;
  const std::vector<RankStats> reports = ReportsAt(**plan, measured);
  auto model = MeasuredCostModel(**plan, reports);
  ASSERT_TRUE(model.ok());
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(model->stages[s].f, measured.stages[s].f, 1e-9);
    EXPECT_NEAR(model->stages[s].b, measured.stages[s].b, 1e-9);
    EXPECT_NEAR(model->stages[s].w, measured.stages[s].w, 1e-9);
  }
  auto sim = core::Simulate((*plan)->plan, measured);
  ASSERT_TRUE(sim.ok());
  auto predicted = PredictBubbleAtMeasuredCosts(**plan, reports);
  ASSERT_TRUE(predicted.ok());
  EXPECT_NEAR(predicted->job, sim->bubble_rate, 1e-9);
  EXPECT_GT(predicted->job, (*plan)->sim.bubble_rate);  // a slow stage makes bubbles elsewhere
}

TEST(MeasuredBubble, FusedBackwardCarriesTheWeightTime) {
  auto plan = PlanJob(Synthetic("1f1b", 2, 4));
  ASSERT_TRUE(plan.ok());
  auto model = MeasuredCostModel(**plan, ReportsAt(**plan, (*plan)->cost));
  ASSERT_TRUE(model.ok());
  // backward_s holds B + W of every BW; the model keeps it in b and sets w = 0.
  EXPECT_NEAR(model->stages[0].b + model->stages[0].w,
              (*plan)->cost.stages[0].b + (*plan)->cost.stages[0].w, 1e-9);
}

TEST(MeasuredBubble, DataParallelReplicasAreSimulatedEach) {
  auto plan = PlanJob(Synthetic("zb-v", 2, 4, /*d=*/2));
  ASSERT_TRUE(plan.ok());
  auto predicted = PredictBubbleAtMeasuredCosts(**plan, ReportsAt(**plan, (*plan)->cost, /*d=*/2));
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  EXPECT_EQ(predicted->ranks.size(), 4u);
  EXPECT_NEAR(predicted->ranks[0], predicted->ranks[2], 1e-9);
}

TEST(MeasuredBubble, WrongNumberOfReportsIsAnError) {
  auto plan = PlanJob(Synthetic("zb-h1", 4, 8));
  ASSERT_TRUE(plan.ok());
  std::vector<RankStats> three(3);
  EXPECT_FALSE(PredictBubbleAtMeasuredCosts(**plan, three).ok());
  EXPECT_FALSE(PredictBubbleAtMeasuredCosts(**plan, {}).ok());
}

}  // namespace
}  // namespace zpipe::coordinator
