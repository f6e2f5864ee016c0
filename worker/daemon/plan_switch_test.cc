// PlanSwitcher over a shared in-memory store, one switcher per rank: every rank switches at the
// same iteration or none does.
#include "worker/daemon/plan_switch.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/plan.h"
#include "core/planning.h"

namespace zpipe::worker {
namespace {

core::Plan MakePlan(const char* schedule, double w) {
  core::PlanRequest req;
  req.schedule = schedule;
  req.pipeline = 4;
  req.microbatches = 8;
  req.inputs = [w](const core::Placement& placement) {
    return core::UniformInputs(placement, core::StageCost{1, 1, w, 1, 0, -1});
  };
  auto planned = core::PlanSchedule(req);
  EXPECT_TRUE(planned.ok()) << planned.status();
  return planned->plan;
}

PlanUpdate Update(const core::Plan& plan, int version, int at) {
  return PlanUpdate{.attempt = 1,
                    .plan_version = version,
                    .switch_iteration = at,
                    .plan_text = core::PlanToText(plan)};
}

TEST(PlanSwitch, EveryRankInTimeSwitchesAtTheIteration) {
  const core::Plan old_plan = MakePlan("zb-v", 1), new_plan = MakePlan("zb-v", 2);
  auto store = NewInMemoryStore();
  std::vector<std::unique_ptr<PlanSwitcher>> ranks;
  for (int g = 0; g < 4; ++g) {
    ranks.push_back(
        std::make_unique<PlanSwitcher>(*store, old_plan, 0, 1, g, 4, absl::Seconds(10)));
    ASSERT_FALSE(*ranks[g]->BeforeIteration(0));
  }
  for (auto& r : ranks) r->Offer(Update(new_plan, 1, 2));
  std::vector<std::thread> threads;
  std::vector<int> switched_at(4, -1);
  for (int g = 0; g < 4; ++g) {
    threads.emplace_back([&, g] {
      for (int it = 1; it < 4; ++it) {
        auto s = ranks[g]->BeforeIteration(it);
        ASSERT_TRUE(s.ok()) << s.status();
        if (s->has_value()) {
          switched_at[g] = it;
          EXPECT_EQ(core::PlanToText((*s)->plan), core::PlanToText(new_plan));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(switched_at[g], 2) << g;
    EXPECT_EQ(ranks[g]->version(), 1);
  }
}

// Rank 3 is already in iteration 2 when the update arrives: it answers "late" at once (while it
// may be blocked on its peers inside that iteration), and nobody switches.
TEST(PlanSwitch, ALateRankKeepsEveryRankOnTheOldPlan) {
  const core::Plan old_plan = MakePlan("zb-v", 1), new_plan = MakePlan("zb-v", 2);
  auto store = NewInMemoryStore();
  std::vector<std::unique_ptr<PlanSwitcher>> ranks;
  for (int g = 0; g < 4; ++g) {
    ranks.push_back(
        std::make_unique<PlanSwitcher>(*store, old_plan, 0, 1, g, 4, absl::Seconds(10)));
  }
  for (int g = 0; g < 3; ++g) ASSERT_FALSE(*ranks[g]->BeforeIteration(1));
  ASSERT_FALSE(*ranks[3]->BeforeIteration(2));  // rank 3 started iteration 2
  for (int g = 0; g < 3; ++g) ranks[g]->Offer(Update(new_plan, 1, 2));
  // The others reach iteration 2 and wait for rank 3's answer, which comes with the update.
  std::vector<std::thread> threads;
  for (int g = 0; g < 3; ++g) {
    threads.emplace_back([&, g] {
      auto s = ranks[g]->BeforeIteration(2);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_FALSE(s->has_value()) << g;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ranks[3]->Offer(Update(new_plan, 1, 2));
  for (auto& t : threads) t.join();
  for (int it = 3; it < 5; ++it) EXPECT_FALSE(*ranks[3]->BeforeIteration(it));
  for (auto& r : ranks) EXPECT_EQ(r->version(), 0);
}

TEST(PlanSwitch, AnUnansweredRankFailsTheWait) {
  const core::Plan old_plan = MakePlan("zb-v", 1), new_plan = MakePlan("zb-v", 2);
  auto store = NewInMemoryStore();
  PlanSwitcher rank0(*store, old_plan, 0, 1, 0, 2, absl::Milliseconds(100));
  rank0.Offer(Update(new_plan, 1, 1));
  auto s = rank0.BeforeIteration(1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded) << s.status();
}

TEST(PlanSwitch, OtherAttemptsAndOldVersionsAreIgnored) {
  const core::Plan old_plan = MakePlan("zb-v", 1), new_plan = MakePlan("zb-v", 2);
  auto store = NewInMemoryStore();
  PlanSwitcher rank0(*store, old_plan, 3, 1, 0, 1, absl::Seconds(1));
  PlanUpdate other = Update(new_plan, 4, 1);
  other.attempt = 2;
  rank0.Offer(other);
  rank0.Offer(Update(new_plan, 3, 1));  // not newer than the running version
  EXPECT_FALSE(*rank0.BeforeIteration(1));
  EXPECT_FALSE(store->Get("plan/v4/0").ok());
}

TEST(PlanSwitch, ChannelKeepsUpdatesUntilAttached) {
  PlanUpdateChannel channel;
  PlanUpdate u;
  u.plan_version = 7;
  channel.Deliver(u);
  std::vector<int> seen;
  channel.Attach([&](const PlanUpdate& x) { seen.push_back(x.plan_version); });
  u.plan_version = 8;
  channel.Deliver(u);
  channel.Attach(nullptr);
  channel.Deliver(u);  // kept for a later handler, not delivered
  EXPECT_EQ(seen, (std::vector<int>{7, 8}));
}

}  // namespace
}  // namespace zpipe::worker
