// The one ComputeOp <-> ActionKind mapping: a round trip for every kind, the proto's names for
// the progress kinds, and unknown values refused.
#include "wire/compute_op.h"

#include <gtest/gtest.h>

#include <set>

namespace zpipe::wire {
namespace {

using core::ActionKind;

// Every value of core::ActionKind, in declaration order.
constexpr ActionKind kEveryKind[] = {
    ActionKind::kForward, ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
    ActionKind::kBackwardFull, ActionKind::kSendAct, ActionKind::kRecvAct,
    ActionKind::kSendGrad, ActionKind::kRecvGrad, ActionKind::kReduce, ActionKind::kRecompute};

TEST(ComputeOpTest, EveryKindRoundTripsThroughItsOwnOp) {
  std::set<int> ops;
  for (ActionKind kind : kEveryKind) {
    const v1::ComputeOp op = ComputeOpOf(kind);
    EXPECT_NE(op, v1::COMPUTE_OP_UNSPECIFIED) << core::ActionKindName(kind);
    EXPECT_TRUE(ops.insert(op).second) << core::ActionKindName(kind);
    EXPECT_EQ(ActionKindOf(op), kind) << core::ActionKindName(kind);
  }
}

TEST(ComputeOpTest, ComputeKindsAreTheProtosFBWAndBW) {
  EXPECT_EQ(ComputeOpOf(ActionKind::kForward), v1::COMPUTE_OP_F);
  EXPECT_EQ(ComputeOpOf(ActionKind::kBackwardInput), v1::COMPUTE_OP_B);
  EXPECT_EQ(ComputeOpOf(ActionKind::kBackwardWeight), v1::COMPUTE_OP_W);
  EXPECT_EQ(ComputeOpOf(ActionKind::kBackwardFull), v1::COMPUTE_OP_BW);
  EXPECT_EQ(ComputeOpOf(ActionKind::kReduce), v1::COMPUTE_OP_REDUCE);
  EXPECT_EQ(ComputeOpOf(ActionKind::kRecompute), v1::COMPUTE_OP_R);
}

TEST(ComputeOpTest, UnspecifiedAndUnknownValuesHaveNoKind) {
  EXPECT_EQ(ActionKindOf(v1::COMPUTE_OP_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(ActionKindOf(11), std::nullopt);
  EXPECT_EQ(ActionKindOf(-1), std::nullopt);
}

}  // namespace
}  // namespace zpipe::wire
