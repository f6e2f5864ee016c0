#include "coordinator/trace_store.h"

#include <gtest/gtest.h>

namespace zpipe::coordinator {
namespace {

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
  store.StartJob("j", *plan, {RankSlot{0, 0, "a"}, RankSlot{1, 0, "b"}});
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

}  // namespace
}  // namespace zpipe::coordinator
