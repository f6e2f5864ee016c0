// Properties every generator must have, over many shapes and random per-stage costs: a plan
// either comes back valid (each F/B/W exactly once, order, memory limit), lowers, simulates to
// the same makespan after lowering, and runs in order with blocking receives — or the generator
// says clearly why it cannot, with InvalidArgument or FailedPrecondition.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

CostModel RandomCost(std::mt19937& rng, int stages) {
  std::uniform_real_distribution<double> t(0.5, 2.0), mem(0.5, 1.5), wfrac(0.2, 0.8);
  CostModel cost;
  for (int s = 0; s < stages; ++s) {
    StageCost c;
    c.f = t(rng);
    c.b = t(rng);
    c.w = t(rng);
    c.mem_f = mem(rng);
    c.mem_w = -wfrac(rng) * c.mem_f;
    c.mem_b = -c.mem_f - c.mem_w;
    cost.stages.push_back(c);
  }
  cost.comm = std::uniform_real_distribution<double>(0, 0.3)(rng);
  return cost;
}

class SchedulePropertyTest : public ::testing::TestWithParam<ScheduleKind> {};

TEST_P(SchedulePropertyTest, PlansAreValidOrRefusedClearly) {
  const ScheduleKind kind = GetParam();
  std::mt19937 rng(1234 + static_cast<int>(kind));
  int generated = 0;
  for (int p : {2, 3, 4, 5, 8, 11, 16}) {
    for (int m : {1, 2, 3, p - 1, p, p + 1, 2 * p, 2 * p + 3, 3 * p, 64}) {
      if (m < 1 || m > 64) continue;
      const Placement pl = PlacementFor(kind, p);
      ScheduleRequest req;
      req.pipeline = p;
      req.microbatches = m;
      req.cost = RandomCost(rng, pl.num_stages());
      const std::string where = absl::StrCat(ScheduleName(kind), " p=", p, " m=", m);
      auto plan = GenerateSchedule(kind, req);
      if (plan.status().code() == absl::StatusCode::kUnimplemented) GTEST_SKIP() << plan.status();
      if (!plan.ok()) {
        EXPECT_TRUE(plan.status().code() == absl::StatusCode::kInvalidArgument ||
                    plan.status().code() == absl::StatusCode::kFailedPrecondition)
            << where << ": " << plan.status();
        EXPECT_FALSE(plan.status().message().empty());
        continue;
      }
      ++generated;
      const double limit = DefaultMemoryLimit(kind, p, m, req.cost);
      ASSERT_TRUE(ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = limit}).ok())
          << where << ": " << ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = limit});
      EXPECT_EQ(plan->placement, pl) << where;
      EXPECT_EQ(plan->num_microbatches, m) << where;
      auto lowered = LowerComm(*plan);
      ASSERT_TRUE(lowered.ok()) << where << ": " << lowered.status();
      ASSERT_TRUE(ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = std::nullopt}).ok())
          << where << ": "
          << ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = std::nullopt});
      auto a = Simulate(*plan, req.cost);
      auto b = Simulate(*lowered, req.cost);
      ASSERT_TRUE(a.ok() && b.ok()) << where;
      EXPECT_NEAR(a->span, b->span, 1e-9 * a->span) << where;
      EXPECT_GE(a->bubble_rate, -1e-12) << where;
      // A schedule that splits backward uses B and W, the others BW.
      const ActionKind expect =
          SplitsBackward(kind) ? ActionKind::kBackwardInput : ActionKind::kBackwardFull;
      bool found = false;
      for (const Action& act : plan->ranks[0]) found |= act.kind == expect;
      EXPECT_TRUE(found) << where;
    }
  }
  EXPECT_GT(generated, 0) << ScheduleName(kind) << " generated no plan at all";
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, SchedulePropertyTest,
                         ::testing::ValuesIn(AllScheduleKinds()),
                         [](const ::testing::TestParamInfo<ScheduleKind>& info) {
                           std::string name(ScheduleName(info.param));
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(ScheduleTest, NamesRoundTrip) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    auto parsed = ParseScheduleKind(ScheduleName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  auto bad = ParseScheduleKind("zb-9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("zb-v"), std::string::npos);
}

TEST(ScheduleTest, RejectsBadRequests) {
  ScheduleRequest req;
  req.pipeline = 0;
  req.microbatches = 4;
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, req).status().code(),
            absl::StatusCode::kInvalidArgument);
  req.pipeline = 4;
  req.microbatches = 0;
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, req).status().code(),
            absl::StatusCode::kInvalidArgument);
  req.microbatches = 4;
  req.cost = CostModel::Uniform(3, StageCost{});  // wrong number of stages
  auto st = GenerateSchedule(ScheduleKind::k1F1B, req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("3 stages"), std::string::npos) << st;
}

TEST(ScheduleTest, OneF1BRefusesTooLittleMemory) {
  ScheduleRequest req;
  req.pipeline = 4;
  req.microbatches = 8;
  req.cost = CostModel::Uniform(4, StageCost{});
  req.memory_limit = 3;
  auto st = GenerateSchedule(ScheduleKind::k1F1B, req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("rank 0 needs 4"), std::string::npos) << st;
}

TEST(ScheduleTest, InterleavedClosedForm) {
  // Megatron interleaved, uniform costs, no comm: bubble time per rank (p-1) * (f+b+w) / v.
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      ScheduleRequest req;
      req.pipeline = p;
      req.microbatches = m;
      req.cost = CostModel::Uniform(2 * p, StageCost{.f = 1, .b = 1, .w = 1});
      auto plan = GenerateSchedule(ScheduleKind::kInterleaved1F1B, req);
      ASSERT_TRUE(plan.ok()) << plan.status();
      auto sim = Simulate(*plan, req.cost);
      ASSERT_TRUE(sim.ok());
      EXPECT_NEAR(sim->span, 2 * m * 3 + (p - 1) * 3, 1e-9) << "p=" << p << " m=" << m;
    }
  }
}

TEST(ScheduleTest, GpipeClosedForm) {
  ScheduleRequest req;
  req.pipeline = 4;
  req.microbatches = 6;
  req.cost = CostModel::Uniform(4, StageCost{.f = 1, .b = 2, .w = 1});
  auto plan = GenerateSchedule(ScheduleKind::kGpipe, req);
  ASSERT_TRUE(plan.ok());
  auto sim = Simulate(*plan, req.cost);
  ASSERT_TRUE(sim.ok());
  EXPECT_NEAR(sim->span, (6 + 3) * 4.0, 1e-9);
  for (int r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(sim->peak_memory[r], 6);
}

}  // namespace
}  // namespace zpipe::core
