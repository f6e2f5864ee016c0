#include "core/lowering.h"

#include <gtest/gtest.h>

#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

struct Case {
  ScheduleKind kind;
  int p, m;
};

class LoweringTest : public ::testing::TestWithParam<Case> {};

TEST_P(LoweringTest, LoweredPlanValidatesAndKeepsMakespan) {
  const Case c = GetParam();
  const Placement pl = PlacementFor(c.kind, c.p);
  ScheduleRequest req;
  req.pipeline = c.p;
  req.microbatches = c.m;
  req.cost = CostModel::Uniform(pl.num_stages(), StageCost{.f = 1.3, .b = 1.1, .w = 0.7}, 0.25);
  auto plan = GenerateSchedule(c.kind, req);
  if (plan.status().code() == absl::StatusCode::kUnimplemented) GTEST_SKIP() << plan.status();
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto lowered = LowerComm(*plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  ASSERT_TRUE(ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = std::nullopt}).ok())
      << ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = std::nullopt});
  EXPECT_EQ(StripComm(*lowered), *plan);
  auto a = Simulate(*plan, req.cost);
  auto b = Simulate(*lowered, req.cost);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->span, b->span, 1e-9);
  SimOptions strict;
  strict.blocking_recv = true;
  EXPECT_TRUE(Simulate(*lowered, req.cost, strict).ok());
  // No comm inside a rank; every send names another rank.
  for (int r = 0; r < c.p; ++r) {
    for (const Action& act : lowered->ranks[r]) {
      if (IsComm(act.kind)) {
        EXPECT_NE(act.peer, r);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, LoweringTest,
    ::testing::Values(Case{ScheduleKind::kGpipe, 4, 8}, Case{ScheduleKind::k1F1B, 2, 5},
                      Case{ScheduleKind::k1F1B, 4, 8}, Case{ScheduleKind::kInterleaved1F1B, 4, 8},
                      Case{ScheduleKind::kInterleaved1F1B, 2, 6}, Case{ScheduleKind::kZbH1, 4, 8},
                      Case{ScheduleKind::kZbH2, 4, 8}, Case{ScheduleKind::kZb2p, 4, 8},
                      Case{ScheduleKind::kZbV, 4, 8}, Case{ScheduleKind::kZbV, 2, 4},
                      Case{ScheduleKind::kVHalf, 4, 8}, Case{ScheduleKind::kVMin, 4, 12},
                      Case{ScheduleKind::kDualPipeV, 4, 8}));

TEST(LoweringTest, VTurnAroundIsLocal) {
  // Hand-written V plan for p = 2, m = 1: stage 1 -> 2 hands over on rank 1, stage 3 on rank 0.
  Plan plan = EmptyPlan("v", Placement::VShape(2), 1);
  plan.ranks[0] = {Action::F(0, 0), Action::F(3, 0), Action::BW(3, 0), Action::BW(0, 0)};
  plan.ranks[1] = {Action::F(1, 0), Action::F(2, 0), Action::BW(2, 0), Action::BW(1, 0)};
  auto lowered = LowerComm(plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  const std::vector<Action> want0 = {Action::F(0, 0),
                                     Action::Comm(ActionKind::kSendAct, 0, 0, 1),
                                     Action::Comm(ActionKind::kRecvAct, 2, 0, 1),
                                     Action::F(3, 0),
                                     Action::BW(3, 0),
                                     Action::Comm(ActionKind::kSendGrad, 3, 0, 1),
                                     Action::Comm(ActionKind::kRecvGrad, 1, 0, 1),
                                     Action::BW(0, 0)};
  EXPECT_EQ(lowered->ranks[0], want0);
  EXPECT_TRUE(ValidatePlan(*lowered).ok()) << ValidatePlan(*lowered);
}

TEST(LoweringTest, RejectsAlreadyLoweredPlan) {
  ScheduleRequest req;
  req.pipeline = 2;
  req.microbatches = 2;
  req.cost = CostModel::Uniform(2, StageCost{});
  auto plan = GenerateSchedule(ScheduleKind::k1F1B, req);
  auto lowered = LowerComm(*plan);
  ASSERT_TRUE(lowered.ok());
  EXPECT_FALSE(LowerComm(*lowered).ok());
}

}  // namespace
}  // namespace zpipe::core
