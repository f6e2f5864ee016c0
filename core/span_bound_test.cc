#include "core/span_bound.h"

#include <gtest/gtest.h>

#include "core/planning.h"

namespace zpipe::core {
namespace {

const StageCost kHalfB{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5};

// Memory-time bound, rank 0 of p = 4 at limit 4 with T_comm = 1: a microbatch holds 1 from its F
// to its B, D = 4 F + 3 B + 6 T_comm = 13 later, and 0.5 for the T_B = 1 to its W: 13.5 per
// microbatch, 4 at a time, plus the last W: 1 + 32 * 13.5 / 4 = 109. The warm-up/cool-down
// argument gives busy 96 + warm-up idle (13 - 4 forwards) = 105.
TEST(SpanBoundTest, MemoryTimeChargesTheRoundTripToEveryMicrobatch) {
  const Placement linear = Placement::Linear(4);
  const CostModel cost = CostModel::Uniform(4, kHalfB, /*comm=*/1);
  EXPECT_DOUBLE_EQ(SpanLowerBound(linear, 32, cost, 4, /*split_backward=*/true), 109);
  // Fused: 4 F + 3 BW + 6 T_comm = 16 per microbatch at 1, plus a BW: 2 + 32 * 16 / 4 = 130.
  EXPECT_DOUBLE_EQ(SpanLowerBound(linear, 32, cost, 4, /*split_backward=*/false), 130);
  // Without communication the warm-up argument is the larger: 96 + 3 = 99.
  EXPECT_DOUBLE_EQ(SpanLowerBound(linear, 32, CostModel::Uniform(4, kHalfB), 4, true), 99);
}

// The bound holds for what the generators make, at the shapes where the memory-time part bites.
TEST(SpanBoundTest, HoldsForGeneratedPlansWithCommunication) {
  for (const char* schedule : {"1f1b", "zb-h1", "zb-1p", "zb-2p", "zb-v", "v-half", "v-min"}) {
    for (double comm : {0.0, 0.5, 2.0}) {
      PlanRequest req;
      req.schedule = schedule;
      req.pipeline = 4;
      req.microbatches = 16;
      req.lower = false;
      req.inputs = [comm](const Placement& pl) { return UniformInputs(pl, kHalfB, comm); };
      absl::StatusOr<PlannedSchedule> p = PlanSchedule(req);
      ASSERT_TRUE(p.ok()) << schedule << ": " << p.status();
      EXPECT_LE(p->span_lower_bound, p->sim.span * (1 + 1e-12)) << schedule << " comm " << comm;
      EXPECT_GT(p->span_lower_bound, 0);
    }
  }
}

// The area argument needs non-negative held amounts; with a stage that frees at F it is off.
TEST(SpanBoundTest, MemoryTimeNeedsNonNegativeHolds) {
  const Placement linear = Placement::Linear(2);
  StageCost odd = kHalfB;
  odd.mem_b = -1.5;  // holds -0.5 between B and W
  odd.mem_w = 0.5;
  const CostModel cost = CostModel::Uniform(2, odd, /*comm=*/5);
  // Busy 3 * 4 = 12 plus the warm-up idle of the round trip (f + 5 + f + b + 5 - 2 forwards).
  EXPECT_DOUBLE_EQ(SpanLowerBound(linear, 4, cost, 2, true), 12 + 11);
}

// Bottleneck: a heavy last stage paces rank 0. Rank 1 runs 8 x (F 2 + BW 2) = 32 after rank 0's
// first forward and T_comm (1.5), and rank 0's last BW follows 0.5 + 2 after: 36, where busy plus
// warm-up and cool-down gives 31 and rank 1's own 32. 1F1B reaches it.
TEST(SpanBoundTest, BottleneckStagePacesEarlierRanks) {
  const Placement linear = Placement::Linear(2);
  CostModel cost = CostModel::Uniform(2, StageCost{.f = 1, .b = 1, .w = 1}, /*comm=*/0.5);
  cost.stages[1] = StageCost{.f = 2, .b = 1.5, .w = 0.5};
  EXPECT_DOUBLE_EQ(SpanLowerBound(linear, 8, cost, 2, /*split_backward=*/false), 36);
  PlanRequest req;
  req.schedule = "1f1b";
  req.pipeline = 2;
  req.microbatches = 8;
  req.inputs = [cost](const Placement&) { return PlanInputs{.cost = cost}; };
  absl::StatusOr<PlannedSchedule> p = PlanSchedule(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->sim.span, 36);
  EXPECT_DOUBLE_EQ(p->span_lower_bound, 36);
}

// The makespan bound holds for every generator's plans, with and without communication and on
// uneven stages, and the ZB generators reach it with the span bound on uniform costs, where
// they stop searching (schedules_zb.cc BestOfSearch::Unbeatable).
TEST(SpanBoundTest, MakespanBoundHoldsAndUniformZbPlansReachIt) {
  CostModel uneven = CostModel::Uniform(4, kHalfB, /*comm=*/0.3);
  uneven.stages[2].f = 2.5;
  uneven.stages[3].b = 1.7;
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-1p", "zb-2p",
                               "zb-v", "v-half", "v-min", "dualpipe-v"}) {
    for (int variant = 0; variant < 3; ++variant) {
      PlanRequest req;
      req.schedule = schedule;
      req.pipeline = 4;
      req.microbatches = 16;
      req.lower = false;
      req.inputs = [variant, &uneven](const Placement& pl) {
        if (variant == 2 && pl.num_stages() == 4) return PlanInputs{.cost = uneven};
        return UniformInputs(pl, kHalfB, variant == 0 ? 0.0 : 0.5);
      };
      absl::StatusOr<PlannedSchedule> p = PlanSchedule(req);
      ASSERT_TRUE(p.ok()) << schedule << ": " << p.status();
      const double bound = MakespanLowerBound(p->plan.placement, 16, p->cost);
      EXPECT_LE(bound, p->sim.global_makespan * (1 + 1e-12)) << schedule << " " << variant;
      EXPECT_GT(bound, 0);
    }
  }
  // p = 8, m = 32, T_comm = 0: rank 7 starts 7 forwards late and then works 32 * 3.
  const Placement linear = Placement::Linear(8);
  const CostModel uniform = CostModel::Uniform(8, kHalfB);
  EXPECT_DOUBLE_EQ(MakespanLowerBound(linear, 32, uniform), 7 + 96);
  PlanRequest req;
  req.schedule = "zb-2p";
  req.pipeline = 8;
  req.microbatches = 32;
  req.inputs = [](const Placement& pl) { return UniformInputs(pl, kHalfB, 0); };
  absl::StatusOr<PlannedSchedule> p = PlanSchedule(req);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->sim.span, p->span_lower_bound);
  EXPECT_DOUBLE_EQ(p->sim.global_makespan, 7 + 96);
}

}  // namespace
}  // namespace zpipe::core
