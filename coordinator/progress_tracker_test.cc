// ProgressTracker: per-rank F/B/W counting, iteration roll-over, dropping events that do not fit
// the plan, and assembling iteration summaries from every rank's report.
#include "coordinator/progress_tracker.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

std::vector<RankSlot> Slots(int p, int d) {
  std::vector<RankSlot> slots;
  for (int g = 0; g < p * d; ++g) slots.push_back({g % p, g / p, absl::StrCat("w", g), "", 0});
  return slots;
}

int Add(ProgressTracker& t, const std::string& worker, int prank, int drank,
        std::vector<int32_t> its, std::vector<int32_t> ops, std::vector<int32_t> stages,
        std::vector<int32_t> mbs) {
  return t.AddEvents("j", worker, prank, drank, {its, ops, stages, mbs});
}

TEST(ProgressTracker, CountsPhasesAndRollsOverIterations) {
  ProgressTracker t;
  t.StartJob("j", core::Placement::VShape(2), /*m=*/2, /*iterations=*/3, 0.1, Slots(2, 1));
  // Rank 0 holds stages 0 and 3 (V shape).
  EXPECT_EQ(Add(t, "w0", 0, 0, {0, 0, 0, 0}, {1, 1, 2, 3}, {0, 3, 3, 3}, {0, 1, 1, 1}), 4);
  JobProgressView v = *t.Get("j", true);
  const RankProgressView& r0 = v.ranks[0];
  EXPECT_EQ(r0.forward_done, 2);
  EXPECT_EQ(r0.backward_done, 1);
  EXPECT_EQ(r0.weight_done, 1);
  EXPECT_EQ(r0.per_iteration, 4);
  // index = chunk * m + microbatch: stage 0 is chunk 0, stage 3 is chunk 1.
  EXPECT_EQ(r0.microbatches,
            (std::vector<Phase>{Phase::kForward, Phase::kNone, Phase::kNone, Phase::kDone}));
  // Next iteration resets the counts; an older iteration is then dropped.
  EXPECT_EQ(Add(t, "w0", 0, 0, {1, 0}, {1, 1}, {0, 0}, {0, 0}), 1);
  v = *t.Get("j", false);
  EXPECT_EQ(v.ranks[0].iteration, 1);
  EXPECT_EQ(v.ranks[0].forward_done, 1);
  EXPECT_TRUE(v.ranks[0].microbatches.empty());
  EXPECT_EQ(t.dropped_events(), 1u);
}

TEST(ProgressTracker, DropsWhatDoesNotFit) {
  ProgressTracker t;
  t.StartJob("j", core::Placement::Linear(2), 2, 3, 0.1, Slots(2, 1));
  EXPECT_EQ(Add(t, "w1", 0, 0, {0}, {1}, {0}, {0}), 0);     // not this worker's rank
  EXPECT_EQ(Add(t, "w0", 0, 0, {0}, {1}, {1}, {0}), 0);     // stage on another rank
  EXPECT_EQ(Add(t, "w0", 0, 0, {0}, {1}, {0}, {2}), 0);     // microbatch out of range
  EXPECT_EQ(Add(t, "w0", 0, 0, {3}, {1}, {0}, {0}), 0);     // iteration out of range
  EXPECT_EQ(Add(t, "w0", 0, 0, {0}, {42}, {0}, {0}), 0);    // unknown op
  EXPECT_EQ(Add(t, "w0", 0, 0, {0, 0}, {1}, {0}, {0}), 0);  // ragged columns
  EXPECT_EQ(Add(t, "w0", 5, 0, {0}, {1}, {0}, {0}), 0);     // rank out of range
  EXPECT_EQ(t.AddEvents("nope", "w0", 0, 0, {}), 0);
  EXPECT_EQ(t.dropped_events(), 8u);
}

// Sends, receives and reductions ride in the same batches for the executed timeline: they are
// neither progress nor dropped, wherever their stage lives (a RECV names the sender's stage).
TEST(ProgressTracker, SkipsTimelineOnlyEventsWithoutDroppingThem) {
  ProgressTracker t;
  t.StartJob("j", core::Placement::Linear(2), 2, 3, 0.1, Slots(2, 1));
  // Rank 1: RECV_ACT s0 mb0 <- r0, F s1 mb0, SEND_GRAD s1 mb0 -> r0, BW s1 mb0, REDUCE.
  EXPECT_EQ(Add(t, "w1", 1, 0, {0, 0, 0, 0, 0}, {6, 1, 7, 4, 9}, {0, 1, 1, 1, 0}, {0, 0, 0, 0, 0}),
            2);
  EXPECT_EQ(Add(t, "w1", 1, 0, {0, 0}, {5, 8}, {1, 0}, {1, 1}), 0);
  const JobProgressView v = *t.Get("j", false);
  EXPECT_EQ(v.ranks[1].forward_done, 1);
  EXPECT_EQ(v.ranks[1].backward_done, 1);
  EXPECT_EQ(v.ranks[1].weight_done, 1);
  EXPECT_EQ(t.dropped_events(), 0u);
}

TEST(ProgressTracker, SummaryWhenEveryRankReported) {
  ProgressTracker t;
  t.StartJob("j", core::Placement::Linear(2), 2, 3, 0.25, Slots(2, 2));
  RankStats s;
  s.duration_s = 1;
  s.busy_s = 0.5;
  s.reduce_s = 0.1;
  s.exposed_reduce_s = 0.05;
  for (int g = 0; g < 3; ++g) {
    s.pipeline_rank = g % 2;
    s.data_rank = g / 2;
    EXPECT_TRUE(t.AddReport("j", absl::StrCat("w", g), 0, s, std::nullopt, std::nullopt, kT0)
                    .empty());
  }
  bool repeated = false;
  EXPECT_TRUE(t.AddReport("j", "w2", 0, s, std::nullopt, std::nullopt, kT0, &repeated).empty());
  EXPECT_TRUE(repeated) << "a duplicate";
  s.pipeline_rank = 1;
  s.data_rank = 1;
  s.duration_s = 2;
  std::vector<IterationSummary> sums =
      t.AddReport("j", "w3", 0, s, 4.0, std::nullopt, kT0, &repeated);
  EXPECT_FALSE(repeated);
  ASSERT_EQ(sums.size(), 1u);
  const IterationSummary* sum = &sums[0];
  EXPECT_EQ(sum->iteration, 0);
  EXPECT_DOUBLE_EQ(sum->duration_s, 2);
  EXPECT_DOUBLE_EQ(sum->bubble_rate, 1 - 2.0 / (4 * 2));
  EXPECT_DOUBLE_EQ(sum->predicted_bubble_rate, 0.25);
  EXPECT_DOUBLE_EQ(sum->reduce_total_s, 0.4);
  EXPECT_DOUBLE_EQ(*sum->loss, 4.0);
  EXPECT_EQ(sum->ranks.size(), 4u);
  EXPECT_EQ(t.Get("j", false)->iterations_done, 1);
  // Sent again after a reconnect: taken already, summarised once.
  EXPECT_TRUE(t.AddReport("j", "w3", 0, s, 4.0, std::nullopt, kT0, &repeated).empty());
  EXPECT_TRUE(repeated);
}

RankStats StatsOf(int pipeline_rank) {
  RankStats s;
  s.pipeline_rank = pipeline_rank;
  s.duration_s = 1;
  s.busy_s = 0.5;
  return s;
}

// Issue 30: after a coordinator outage the workers' outboxes arrive one after another, so rank 0's
// reports of every iteration of the outage come before rank 1's. With 64 half-reported iterations
// kept, the oldest were dropped and ~26 iterations of a 20 s outage had no summary.
TEST(ProgressTracker, AnOutageBacklogFromOneRankThenAnotherLosesNoIteration) {
  ProgressTracker t;
  constexpr int kIterations = 500;
  t.StartJob("j", core::Placement::Linear(2), 2, kIterations, 0.1, Slots(2, 1));
  for (int it = 0; it < kIterations; ++it) {
    ASSERT_TRUE(t.AddReport("j", "w0", it, StatsOf(0), 2.0, std::nullopt, kT0).empty());
  }
  std::vector<int> summarised;
  for (int it = 0; it < kIterations; ++it) {
    for (const IterationSummary& s :
         t.AddReport("j", "w1", it, StatsOf(1), 2.0, std::nullopt, kT0 + absl::Seconds(5))) {
      summarised.push_back(s.iteration);
      EXPECT_EQ(s.ranks.size(), 2u);
    }
  }
  ASSERT_EQ(summarised.size(), static_cast<size_t>(kIterations));
  for (int it = 0; it < kIterations; ++it) EXPECT_EQ(summarised[it], it);
  EXPECT_EQ(t.Get("j", false)->iterations_done, kIterations);
}

// Rank 0's reports of iterations 3 and 4 reached a coordinator that died; the next one only gets
// rank 1's. Those iterations still get a summary (from rank 1) once iteration 5 completes, in
// order, before it.
TEST(ProgressTracker, IterationsWhoseOtherReportsDiedWithACoordinatorAreStillSummarised) {
  ProgressTracker t;
  t.StartJob("j", core::Placement::Linear(2), 2, 10, 0.1, Slots(2, 1), /*iterations_done=*/3);
  ASSERT_TRUE(t.AddReport("j", "w1", 3, StatsOf(1), 2.0, std::nullopt, kT0).empty());
  ASSERT_TRUE(t.AddReport("j", "w1", 4, StatsOf(1), 2.0, std::nullopt, kT0).empty());
  ASSERT_TRUE(t.AddReport("j", "w1", 5, StatsOf(1), 2.0, std::nullopt, kT0).empty());
  std::vector<IterationSummary> s = t.AddReport("j", "w0", 5, StatsOf(0), 2.0, std::nullopt, kT0);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].iteration, 3);
  ASSERT_EQ(s[0].ranks.size(), 1u);
  EXPECT_EQ(s[0].ranks[0].pipeline_rank, 1);
  EXPECT_DOUBLE_EQ(s[0].bubble_rate, 0.5);
  EXPECT_EQ(s[1].iteration, 4);
  EXPECT_EQ(s[2].iteration, 5);
  EXPECT_EQ(s[2].ranks.size(), 2u);
  EXPECT_EQ(t.Get("j", false)->iterations_done, 6);
}

// The bound is time, not a count: a half-reported iteration waits keep_pending (the job manager
// makes it the recovery grace plus a heartbeat timeout) for its other ranks, then is given up.
TEST(ProgressTracker, AHalfReportedIterationWaitsKeepPendingThenIsGivenUp) {
  ProgressTracker::Options options;
  options.keep_pending = absl::Seconds(40);
  ProgressTracker t(options);
  t.StartJob("j", core::Placement::Linear(2), 2, 10, 0.1, Slots(2, 1));
  ASSERT_TRUE(t.AddReport("j", "w0", 0, StatsOf(0), 2.0, std::nullopt, kT0).empty());
  ASSERT_TRUE(t.AddReport("j", "w0", 1, StatsOf(0), 2.0, std::nullopt, kT0).empty());
  // 39 s later rank 1 comes back: iteration 0 still waited for it.
  ASSERT_EQ(t.AddReport("j", "w1", 0, StatsOf(1), 2.0, std::nullopt, kT0 + absl::Seconds(39))
                .size(),
            1u);
  // Iteration 1 waited 41 s when the next report comes: given up, so iteration 2 starts afresh.
  ASSERT_TRUE(
      t.AddReport("j", "w0", 2, StatsOf(0), 2.0, std::nullopt, kT0 + absl::Seconds(41)).empty());
  std::vector<IterationSummary> s =
      t.AddReport("j", "w1", 1, StatsOf(1), 2.0, std::nullopt, kT0 + absl::Seconds(41));
  ASSERT_EQ(s.size(), 0u) << "iteration 1 was kept past keep_pending";
}

}  // namespace
}  // namespace zpipe::coordinator
