#include "core/validator.h"

#include <gtest/gtest.h>

#include "core/lowering.h"
#include "core/schedule.h"

namespace zpipe::core {
namespace {

Plan OneF1B(int p, int m) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = CostModel::Uniform(p, StageCost{});
  return *GenerateSchedule(ScheduleKind::k1F1B, req);
}

void ExpectError(const Plan& plan, absl::string_view fragment, const ValidateOptions& o = {}) {
  absl::Status st = ValidatePlan(plan, o);
  ASSERT_FALSE(st.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(st.message().find(fragment), absl::string_view::npos) << st;
}

TEST(ValidatorTest, AcceptsGeneratedPlans) {
  EXPECT_TRUE(ValidatePlan(OneF1B(4, 8)).ok());
  EXPECT_TRUE(ValidatePlan(*LowerComm(OneF1B(4, 8))).ok());
}

TEST(ValidatorTest, DuplicateAndMissing) {
  Plan plan = OneF1B(2, 2);
  plan.ranks[0].push_back(Action::F(0, 1));
  ExpectError(plan, "appears more than once");
  plan = OneF1B(2, 2);
  plan.ranks[1].pop_back();
  ExpectError(plan, "stage 1 microbatch 1 (rank 1): no B (or BW)");
  plan = OneF1B(2, 2);
  plan.ranks[1].push_back(Action::W(1, 0));
  ExpectError(plan, "has BW and also B or W");
}

TEST(ValidatorTest, WrongRankAndRange) {
  Plan plan = OneF1B(2, 2);
  plan.ranks[0].push_back(Action::F(1, 0));
  ExpectError(plan, "stage 1 is placed on rank 1");
  plan = OneF1B(2, 2);
  plan.ranks[0].push_back(Action::F(0, 9));
  ExpectError(plan, "microbatch not in [0, 2)");
}

TEST(ValidatorTest, LocalOrder) {
  Plan plan = EmptyPlan("t", Placement::Linear(1), 1);
  plan.ranks[0] = {Action::F(0, 0), Action::W(0, 0), Action::B(0, 0)};
  ExpectError(plan, "runs before its B");
  plan.ranks[0] = {Action::BW(0, 0), Action::F(0, 0)};
  ExpectError(plan, "runs before its F");
}

TEST(ValidatorTest, CrossRankDeadlock) {
  Plan plan = OneF1B(2, 2);
  // Rank 1 runs microbatch 1 before 0, rank 0 waits for BW of microbatch 0 before F of 1.
  plan.ranks[0] = {Action::F(0, 0), Action::BW(0, 0), Action::F(0, 1), Action::BW(0, 1)};
  plan.ranks[1] = {Action::F(1, 1), Action::BW(1, 1), Action::F(1, 0), Action::BW(1, 0)};
  ExpectError(plan, "deadlock");
}

TEST(ValidatorTest, MemoryLimit) {
  Plan plan = OneF1B(4, 8);
  CostModel cost = CostModel::Uniform(4, StageCost{.mem_f = 1, .mem_b = -0.5, .mem_w = -0.5});
  EXPECT_TRUE(ValidatePlan(plan, {.cost = &cost, .memory_limit = 4}).ok());
  ExpectError(plan, "memory 4 exceeds the limit 3", {.cost = &cost, .memory_limit = 3});
}

TEST(ValidatorTest, CommOrderingRule) {
  Plan lowered = *LowerComm(OneF1B(2, 3));
  // Receive everything up front on rank 1, in reverse order: each receive still precedes its
  // consumer, but the k-th receive no longer matches the k-th send.
  auto& r1 = lowered.ranks[1];
  std::vector<Action> recvs;
  for (const Action& a : r1) {
    if (IsRecv(a.kind)) recvs.insert(recvs.begin(), a);
  }
  std::erase_if(r1, [](const Action& a) { return IsRecv(a.kind); });
  r1.insert(r1.begin(), recvs.begin(), recvs.end());
  ExpectError(lowered, "comm order");
}

TEST(ValidatorTest, CommMissingAndLocal) {
  Plan lowered = *LowerComm(OneF1B(2, 2));
  auto& r0 = lowered.ranks[0];
  for (size_t k = 0; k < r0.size(); ++k) {
    if (IsSend(r0[k].kind)) {
      r0.erase(r0.begin() + k);
      break;
    }
  }
  ExpectError(lowered, "missing 'SEND_ACT s0 mb0 -> r1' on rank 0");
  lowered = *LowerComm(OneF1B(2, 2));
  lowered.ranks[0].push_back(Action::Comm(ActionKind::kSendAct, 0, 0, 0));
  ExpectError(lowered, "comm within a rank");
}

TEST(ValidatorTest, ReduceTwice) {
  Plan plan = OneF1B(2, 2);
  plan.ranks[0].push_back(Action::Reduce(0, 0));
  EXPECT_TRUE(ValidatePlan(plan).ok());
  plan.ranks[0].push_back(Action::Reduce(0, 0));
  ExpectError(plan, "bucket reduced twice");
}

}  // namespace
}  // namespace zpipe::core
