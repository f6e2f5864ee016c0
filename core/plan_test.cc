#include "core/plan.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"

namespace zpipe::core {
namespace {

TEST(PlanTest, ActionTextForms) {
  EXPECT_EQ(ActionToString(Action::F(3, 7)), "F s3 mb7");
  EXPECT_EQ(ActionToString(Action::BW(0, 1)), "BW s0 mb1");
  EXPECT_EQ(ActionToString(Action::Comm(ActionKind::kSendAct, 3, 7, 2)), "SEND_ACT s3 mb7 -> r2");
  EXPECT_EQ(ActionToString(Action::Comm(ActionKind::kRecvGrad, 4, 1, 0)), "RECV_GRAD s4 mb1 <- r0");
  EXPECT_EQ(ActionToString(Action::Reduce(1, 0)), "REDUCE chunk1 bucket0");
  for (const Action& a : {Action::F(3, 7), Action::B(1, 2), Action::W(0, 0), Action::BW(5, 9),
                          Action::Comm(ActionKind::kSendGrad, 2, 3, 1),
                          Action::Comm(ActionKind::kRecvAct, 1, 1, 0), Action::Reduce(1, 4)}) {
    auto parsed = ParseAction(ActionToString(a));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, a);
  }
}

TEST(PlanTest, ParseActionErrors) {
  EXPECT_FALSE(ParseAction("").ok());
  EXPECT_FALSE(ParseAction("X s1 mb1").ok());
  EXPECT_FALSE(ParseAction("F s1").ok());
  EXPECT_FALSE(ParseAction("F 1 mb1").ok());
  EXPECT_FALSE(ParseAction("F s-1 mb1").ok());
  EXPECT_FALSE(ParseAction("SEND_ACT s1 mb1 <- r2").ok());
  EXPECT_FALSE(ParseAction("REDUCE bucket0 chunk1").ok());
  EXPECT_NE(ParseAction("F s1 mbx").status().message().find("mb<number>"), std::string::npos);
}

TEST(PlanTest, TextRoundTripsForEverySchedule) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    const Placement pl = PlacementFor(kind, 4);
    ScheduleRequest req;
    req.pipeline = 4;
    req.microbatches = 8;
    req.cost = CostModel::Uniform(pl.num_stages(), StageCost{});
    auto plan = GenerateSchedule(kind, req);
    if (!plan.ok()) continue;  // covered by the schedule tests
    for (const Plan& p : {*plan, *LowerComm(*plan)}) {
      const std::string text = PlanToText(p);
      auto parsed = ParsePlanText(text);
      ASSERT_TRUE(parsed.ok()) << ScheduleName(kind) << ": " << parsed.status();
      EXPECT_EQ(*parsed, p) << ScheduleName(kind);
      EXPECT_EQ(PlanToText(*parsed), text);
    }
  }
}

TEST(PlanTest, ParsePlanTextErrorsNameTheLine) {
  auto bad = ParsePlanText(
      "zpipe-plan v1\nplacement linear ranks 2 chunks 1 microbatches 1\n"
      "rank 0\nF s0 mb0\nrank 7\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 5"), std::string::npos) << bad.status();
  EXPECT_FALSE(ParsePlanText("nope").ok());
  EXPECT_FALSE(ParsePlanText("zpipe-plan v1\nrank 0\n").ok());
  EXPECT_FALSE(ParsePlanText("zpipe-plan v1\nplacement v ranks 2 chunks 1 microbatches 1\n").ok());
  auto ok =
      ParsePlanText("# comment\nzpipe-plan v1\n\nplacement v ranks 2 chunks 2 microbatches 3\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->placement, Placement::VShape(2));
  EXPECT_EQ(ok->num_microbatches, 3);
}

// A second placement line with fewer ranks shrank the ranks under an open 'rank 3', and the next
// action was appended to a destroyed vector (heap-use-after-free; found by fuzz_smoke in CI).
TEST(PlanTest, ParsePlanTextRefusesASecondPlacement) {
  auto plan = ParsePlanText(
      "zpipe-plan v1\nplacement linear ranks 4 chunks 1 microbatches 1\nrank 3\nF s3 mb0\n"
      "placement linear ranks 2 chunks 1 microbatches 1\nF s1 mb0\n");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("line 5: a second 'placement' line"), std::string::npos)
      << plan.status();
}

// Plan text is what workers are sent. These placements allocated 48 GB (ranks), overflowed
// ranks x chunks (chunks), or made the validator allocate GBs (microbatches) before the parser
// checked the plan bounds. fuzz/plan_text_fuzzer.cc found the first (a 10 s timeout).
TEST(PlanTest, ParsePlanTextRefusesPlacementsBeyondThePlanBounds) {
  for (const char* placement : {"placement linear ranks 66666664 chunks 1 microbatches 1",
                                "placement linear ranks 2000000000 chunks 1 microbatches 1",
                                "placement interleaved ranks 64 chunks 2000000000 microbatches 1",
                                "placement linear ranks 1 chunks 1 microbatches 2000000000",
                                "placement v ranks 64 chunks 2 microbatches 4096"}) {
    auto plan = ParsePlanText(absl::StrCat("zpipe-plan v1\n", placement, "\nrank 0\nF s0 mb0\n"));
    ASSERT_FALSE(plan.ok()) << placement;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find("line 2: "), std::string::npos) << plan.status();
    EXPECT_NE(plan.status().message().find("exceed the plan bounds"), std::string::npos)
        << plan.status();
  }
  EXPECT_TRUE(
      ParsePlanText("zpipe-plan v1\nplacement v ranks 64 chunks 2 microbatches 512\n").ok());
}

}  // namespace
}  // namespace zpipe::core

namespace zpipe::core {
namespace {

TEST(PlanTest, NeighbourInputIsWhatAComputeActionTakesFromTheNextStageOver) {
  EXPECT_EQ(NeighbourInput(Action::F(2, 5), 4), Action::F(1, 5));
  EXPECT_EQ(NeighbourInput(Action::B(2, 5), 4), Action::B(3, 5));
  EXPECT_EQ(NeighbourInput(Action::BW(1, 0), 4), Action::B(2, 0));
  EXPECT_EQ(NeighbourInput(Action::F(0, 5), 4), std::nullopt);  // reads the data
  EXPECT_EQ(NeighbourInput(Action::B(3, 5), 4), std::nullopt);  // the last stage's own loss
  EXPECT_EQ(NeighbourInput(Action::W(2, 5), 4), std::nullopt);  // its own B
  EXPECT_EQ(NeighbourInput(Action::Comm(ActionKind::kSendAct, 2, 5, 3), 4), std::nullopt);
}

}  // namespace
}  // namespace zpipe::core
