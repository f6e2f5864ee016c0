#include "coordinator/trace_store.h"

#include <gtest/gtest.h>

namespace zpipe::coordinator {
namespace {

// Pipeline ranks 0 and 1 on workers "a" and "b".
std::vector<RankSlot> TwoRanks() {
  std::vector<RankSlot> slots(2);
  // Move-assigned, not assigned from the literal: GCC 12 warns falsely (-Wrestrict, its bug 105329)
  // on std::string::assign(const char*) inlined here.
  slots[0].worker_name = std::string("a");
  slots[1].pipeline_rank = 1;
  slots[1].worker_name = std::string("b");
  return slots;
}

TEST(ClockOffsetEstimatorTest, TakesTheLeastDelayedSampleInTheWindow) {
  ClockOffsetEstimator e;
  EXPECT_EQ(e.Estimate().samples, 0);
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  const double worker_behind = 2.5;  // the worker's clock is 2.5 s behind
  auto worker_time = [&](absl::Time coordinator_send) {
    return absl::ToDoubleSeconds(coordinator_send - absl::UnixEpoch()) - worker_behind;
  };
  // Delays 30 ms, 2 ms, 50 ms: the estimate is offset + 2 ms.
  e.AddSample(t0 + absl::Milliseconds(30), worker_time(t0));
  e.AddSample(t0 + absl::Seconds(1) + absl::Milliseconds(2), worker_time(t0 + absl::Seconds(1)));
  e.AddSample(t0 + absl::Seconds(2) + absl::Milliseconds(50), worker_time(t0 + absl::Seconds(2)));
  EXPECT_NEAR(e.Estimate().offset_s, worker_behind + 0.002, 1e-6);
  EXPECT_EQ(e.Estimate().samples, 3);
  // Once the fast sample leaves the window, the next best one counts.
  const absl::Time later = t0 + ClockOffsetEstimator::kWindow + absl::Seconds(1.5);
  e.AddSample(later + absl::Milliseconds(10), worker_time(later));
  EXPECT_NEAR(e.Estimate().offset_s, worker_behind + 0.010, 1e-6);
}

TEST(TraceStoreTest, KeepsRecentIterationsAlignedAndFindsTheLatestComplete) {
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(
      "zpipe-plan v1\nschedule 1f1b\nplacement linear ranks 2 chunks 1 microbatches 1\n"
      "rank 0\nF s0 mb0\nBW s0 mb0\nrank 1\nF s1 mb0\nBW s1 mb0\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  TraceStore store;
  store.StartJob("j", *plan, TwoRanks());
  EXPECT_EQ(store.Get("j", std::nullopt).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Get("other", std::nullopt).status().code(), absl::StatusCode::kNotFound);
  const absl::Time now = absl::FromUnixSeconds(1000);
  store.ObserveClock("b", now, 999.0);  // b's clock is 1 s behind (no delay)
  auto add = [&](const std::string& worker, int rank, int it, double t) {
    const int32_t its[] = {it, it};
    const core::Action actions[] = {core::Action::F(rank, 0), core::Action::BW(rank, 0)};
    const double starts[] = {t, t + 0.2}, ends[] = {t + 0.1, t + 0.3};
    store.AddActions("j", worker, rank, 0, its, actions, starts, ends);
  };
  for (int it = 0; it < TraceStore::kKeepIterations + 3; ++it) {
    add("a", 0, it, 1000 + it);
    add("b", 1, it, 999 + it + 0.1);
  }
  add("a", 0, 100, 2000);  // rank 1 has not reported iteration 100: not complete
  add("x", 0, 101, 2000);  // a worker that does not hold the rank: ignored
  absl::StatusOr<JobTrace> t = store.Get("j", std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->iteration, TraceStore::kKeepIterations + 2);
  EXPECT_TRUE(t->complete);
  ASSERT_EQ(t->ranks.size(), 2u);
  ASSERT_EQ(t->ranks[1].actions.size(), 2u);
  EXPECT_EQ(t->ranks[1].clock.samples, 1);
  // Rank 1's F starts 0.1 s after rank 0's on the coordinator's clock.
  EXPECT_NEAR(t->ranks[1].actions[0].start - t->ranks[0].actions[0].start, 0.1, 1e-9);
  EXPECT_EQ(t->available_iterations.back(), 100);
  EXPECT_LE(t->available_iterations.size(), static_cast<size_t>(TraceStore::kKeepIterations) + 1);
  EXPECT_EQ(store.Get("j", 0).status().code(), absl::StatusCode::kNotFound);  // dropped
  absl::StatusOr<JobTrace> partial = store.Get("j", 100);
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->complete);
}

// Sends, receives and reductions are kept beside compute, per (job, iteration, rank), aligned by
// the same offset. A rank that reports communication completes an iteration only once its
// plan's sends and receives are all there (its last send may trail its last compute action);
// reductions do not count (the worker's buckets may differ from the plan's).
TEST(TraceStoreTest, KeepsCommAndReduceEventsAlignedLikeCompute) {
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(
      "zpipe-plan v1\nschedule 1f1b\nplacement linear ranks 2 chunks 1 microbatches 1\n"
      "rank 0\nF s0 mb0\nSEND_ACT s0 mb0 -> r1\nRECV_GRAD s1 mb0 <- r1\nBW s0 mb0\n"
      "REDUCE chunk0 bucket0\n"
      "rank 1\nRECV_ACT s0 mb0 <- r0\nF s1 mb0\nBW s1 mb0\nSEND_GRAD s1 mb0 -> r0\n"
      "REDUCE chunk0 bucket0\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  TraceStore store;
  store.StartJob("j", *plan, TwoRanks());
  const absl::Time now = absl::FromUnixSeconds(1000);
  store.ObserveClock("a", now, 1000.0);
  store.ObserveClock("b", now, 997.0);  // b's clock is 3 s behind
  using core::Action;
  using core::ActionKind;
  auto add = [&](const std::string& worker, int rank, std::vector<Action> actions,
                 std::vector<double> starts, std::vector<double> ends) {
    const std::vector<int32_t> its(actions.size(), 0);
    store.AddActions("j", worker, rank, 0, its, actions, starts, ends);
  };
  // Rank 0 (coordinator clock = its own): F, send posted at 1.1 and done at 1.3, receive posted at
  // 1.1 with data at 2.2, BW, reduce.
  add("a", 0,
      {Action::F(0, 0), Action::Comm(ActionKind::kRecvGrad, 1, 0, 1),
       Action::Comm(ActionKind::kSendAct, 0, 0, 1), Action::BW(0, 0), Action::Reduce(0, 0)},
      {1.0, 1.1, 1.1, 2.3, 2.4}, {1.1, 2.2, 1.3, 2.4, 2.6});
  // Rank 1 on its own clock (-3 s): receive posted at 1.0 and complete at 1.2, F, BW, and
  // compute is complete, but the SEND_GRAD has not been reported yet.
  add("b", 1, {Action::Comm(ActionKind::kRecvAct, 0, 0, 0), Action::F(1, 0), Action::BW(1, 0)},
      {-2.0, -1.8, -1.4}, {-1.8, -1.5, -1.0});
  absl::StatusOr<JobTrace> partial = store.Get("j", 0);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_FALSE(partial->complete);
  EXPECT_EQ(store.Get("j", std::nullopt).status().code(), absl::StatusCode::kFailedPrecondition);
  add("b", 1, {Action::Comm(ActionKind::kSendGrad, 1, 0, 0)}, {-1.0}, {-0.85});
  absl::StatusOr<JobTrace> t = store.Get("j", std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
  ASSERT_EQ(t->ranks.size(), 2u);
  ASSERT_EQ(t->ranks[0].actions.size(), 5u);
  ASSERT_EQ(t->ranks[1].actions.size(), 4u);
  EXPECT_EQ(t->ranks[0].actions[4].action, Action::Reduce(0, 0));
  EXPECT_NEAR(t->ranks[0].actions[4].end, 2.6, 1e-9);
  // Rank 1's events moved by +3 s: its receive completes after rank 0's send was posted, and
  // rank 0's receive completes after rank 1's send was posted.
  const core::TimedAction& recv_act = t->ranks[1].actions[0];
  const core::TimedAction& send_grad = t->ranks[1].actions[3];
  EXPECT_EQ(recv_act.action, Action::Comm(ActionKind::kRecvAct, 0, 0, 0));
  EXPECT_NEAR(recv_act.start, 1.0, 1e-9);
  EXPECT_NEAR(recv_act.end, 1.2, 1e-9);
  EXPECT_GE(recv_act.end, t->ranks[0].actions[2].start);
  EXPECT_NEAR(send_grad.start, 2.0, 1e-9);
  EXPECT_GE(t->ranks[0].actions[1].end, send_grad.start);
}

// A worker that reports only compute (an older one) still completes its iterations.
TEST(TraceStoreTest, ComputeOnlyRanksCompleteOnCompute) {
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(
      "zpipe-plan v1\nschedule 1f1b\nplacement linear ranks 2 chunks 1 microbatches 1\n"
      "rank 0\nF s0 mb0\nSEND_ACT s0 mb0 -> r1\nRECV_GRAD s1 mb0 <- r1\nBW s0 mb0\n"
      "rank 1\nRECV_ACT s0 mb0 <- r0\nF s1 mb0\nBW s1 mb0\nSEND_GRAD s1 mb0 -> r0\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  TraceStore store;
  store.StartJob("j", *plan, TwoRanks());
  for (int r = 0; r < 2; ++r) {
    const int32_t its[] = {0, 0};
    const core::Action actions[] = {core::Action::F(r, 0), core::Action::BW(r, 0)};
    const double starts[] = {1.0, 2.0}, ends[] = {1.5, 2.5};
    store.AddActions("j", r == 0 ? "a" : "b", r, 0, its, actions, starts, ends);
  }
  absl::StatusOr<JobTrace> t = store.Get("j", std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
}

}  // namespace
}  // namespace zpipe::coordinator
