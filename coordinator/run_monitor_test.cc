// RunMonitor on its own: progress and timeline ingest, reports folded into summaries, summaries
// recorded on job records, and the metrics an accepted report feeds (a recording Metrics fake).
#include "coordinator/run_monitor.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

class RecordingMetrics : public NullMetrics {
 public:
  void ObserveRankIteration(const std::string& job_id, int iteration,
                            const RankStats& /*stats*/) override {
    rank_iterations.push_back(absl::StrCat(job_id, "/", iteration));
  }
  void ObserveJobIteration(const std::string& job_id, const IterationSummary& summary,
                           const std::optional<PredictedBubble>& predicted) override {
    job_iterations.push_back(absl::StrCat(job_id, "/", summary.iteration));
    last_predicted = predicted;
  }
  std::vector<std::string> rank_iterations, job_iterations;
  std::optional<PredictedBubble> last_predicted;
};

JobSpec Spec(int p) {
  JobSpec s;
  s.name = "unit";
  s.model = SyntheticConfig{1, 1, 1, 16, 8};
  s.pipeline = p;
  s.schedule = "1f1b";
  s.microbatches = 4;
  s.microbatch_size = 1;
  s.iterations = 3;
  s.lr = 0.1;
  return s;
}

std::vector<RankSlot> Ranks(int p) {
  std::vector<RankSlot> ranks;
  for (int r = 0; r < p; ++r) {
    RankSlot slot;
    slot.pipeline_rank = r;
    slot.worker_name = absl::StrCat("w", r);
    ranks.push_back(slot);
  }
  return ranks;
}

RankStats Stats(int pipeline_rank) {
  RankStats stats;
  stats.pipeline_rank = pipeline_rank;
  stats.duration_s = 2;
  stats.busy_s = 1.5;
  stats.forward_s = 0.5;
  stats.backward_s = 1.0;
  return stats;
}

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

class RunMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(spec_);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *plan;
    monitor_.StartJob("j", spec_, *plan_, Ranks(2));
  }
  JobSpec spec_ = Spec(2);
  std::shared_ptr<const JobPlan> plan_;
  RecordingMetrics metrics_;
  RunMonitor monitor_{metrics_};
};

TEST_F(RunMonitorTest, ProgressCountsComputeAndDropsUnknownOps) {
  const std::vector<int32_t> its = {0, 0, 0}, ops = {1, 4, 99}, stages = {0, 0, 0}, mbs = {0, 0, 0};
  const uint64_t version = monitor_.ProgressVersion("j");
  monitor_.AddProgress("w0", {"j", 0, 0, {its, ops, stages, mbs}, {}, {}, {}, {}, {}}, kT0);
  EXPECT_EQ(monitor_.dropped_events(), 1u);
  EXPECT_NE(monitor_.ProgressVersion("j"), version);
  std::optional<JobProgressView> progress = monitor_.Progress("j", true);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->ranks[0].forward_done, 1);
  EXPECT_EQ(progress->ranks[0].backward_done, 1);
  EXPECT_FALSE(monitor_.Progress("never-started", false).has_value());
}

TEST_F(RunMonitorTest, TimedEventsReachTheTimelineOnTheCoordinatorsClock) {
  // The worker's clock is 1 s behind; its batch leaves as its last event ends.
  const double t = absl::ToDoubleSeconds(kT0 - absl::UnixEpoch()) - 1.0;
  const std::vector<int32_t> its = {0, 0}, ops = {1, 6}, stages = {0, 0}, mbs = {0, 1},
                             peers = {-1, 1}, chunks = {0, 0}, buckets = {0, 0};
  const std::vector<double> starts = {t - 0.004, t - 0.002}, ends = {t - 0.003, t};
  monitor_.AddProgress(
      "w0", {"j", 0, 0, {its, ops, stages, mbs}, starts, ends, peers, chunks, buckets}, kT0);
  absl::StatusOr<JobTrace> trace = monitor_.Trace("j", 0);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::vector<core::TimedAction>& got = trace->ranks[0].actions;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].action, core::Action::F(0, 0));
  EXPECT_EQ(got[1].action, core::Action::Comm(core::ActionKind::kRecvAct, 0, 1, 1));
  EXPECT_NEAR(trace->ranks[0].clock.offset_s, 1.0, 1e-6);
  EXPECT_NEAR(got[1].end, ends[1] + 1.0, 1e-6);
  EXPECT_TRUE(absl::IsNotFound(monitor_.Trace("other", 0).status()));
}

TEST_F(RunMonitorTest, ReportsBecomeASummaryWhenEveryRankReported) {
  EXPECT_TRUE(monitor_.AddReport("j", "w0", 0, Stats(0), 3.0, std::nullopt, kT0).empty());
  std::vector<IterationSummary> summaries =
      monitor_.AddReport("j", "w1", 0, Stats(1), 3.0, std::nullopt, kT0);
  ASSERT_EQ(summaries.size(), 1u);
  std::optional<IterationSummary> summary = summaries[0];
  EXPECT_EQ(summary->iteration, 0);
  EXPECT_DOUBLE_EQ(summary->bubble_rate, 0.25);

  monitor_.ObserveIteration("j", 0, Stats(0), std::nullopt, plan_);
  EXPECT_EQ(metrics_.rank_iterations, (std::vector<std::string>{"j/0"}));
  EXPECT_TRUE(metrics_.job_iterations.empty());
  monitor_.ObserveIteration("j", 0, Stats(1), summary, plan_);
  EXPECT_EQ(metrics_.job_iterations, (std::vector<std::string>{"j/0"}));
  EXPECT_TRUE(metrics_.last_predicted.has_value());
  monitor_.ObserveIteration("j", 0, Stats(1), summary, nullptr);  // no plan: nothing predicted
  EXPECT_FALSE(metrics_.last_predicted.has_value());
}

TEST(RunMonitorRecordTest, RecordSummaryCountsIterationsAndSaysWhereAnAttemptResumed) {
  JobRecord job;
  job.id = "j";
  job.last_sequence = 4;
  JobAttemptRecord first;
  first.attempt = 1;
  first.iterations_done = 9;
  first.start_iteration = 0;
  JobAttemptRecord second;
  second.attempt = 2;
  job.attempts = {first, second};
  job.iterations_done = 9;
  IterationSummary summary;
  summary.iteration = 6;
  summary.loss = 1.5;

  JobEvent event = RunMonitor::RecordSummary(job, summary, kT0);
  EXPECT_EQ(event.kind, JobEvent::Kind::kIteration);
  EXPECT_EQ(event.sequence, 5);
  EXPECT_EQ(event.time, kT0);
  EXPECT_EQ(event.summary, summary);
  EXPECT_EQ(job.last_sequence, 5);
  EXPECT_EQ(job.iterations_done, 9);  // never goes backwards
  EXPECT_EQ(job.attempts[1].start_iteration, 6);
  EXPECT_EQ(job.reason, "attempt 2 resumed at iteration 6 (3 iterations run again)");
  EXPECT_EQ(job.latest_summary, summary);

  summary.iteration = 9;
  job.reason = "running";
  RunMonitor::RecordSummary(job, summary, kT0);
  EXPECT_EQ(job.iterations_done, 10);
  EXPECT_EQ(job.attempts[1].start_iteration, 6);  // only the first one
  EXPECT_EQ(job.reason, "running");
}

}  // namespace
}  // namespace zpipe::coordinator

namespace zpipe::coordinator {
namespace {

TEST(IterationLogLineTest, SaysLossEvalLossTokensPerSecondAndBubble) {
  IterationSummary s;
  s.iteration = 12;
  s.duration_s = 0.5;
  s.loss = 3.45214;
  s.eval_loss = 3.60119;
  s.bubble_rate = 0.1184;
  s.predicted_bubble_rate = 0.09;
  s.ranks.resize(2);
  s.ranks[0].tokens = 1024;
  s.ranks[1].tokens = 1024;
  EXPECT_EQ(RunMonitor::IterationLogLine(s),
            "iteration 12: loss 3.4521, eval loss 3.6012, 4096 tokens/s, bubble 11.8% "
            "(predicted 9.0%)");
  s.predicted_bubble_measured_costs = 0.102;
  EXPECT_EQ(RunMonitor::IterationLogLine(s),
            "iteration 12: loss 3.4521, eval loss 3.6012, 4096 tokens/s, bubble 11.8% "
            "(predicted 10.2% at measured costs, planned 9.0%)");
  s.predicted_bubble_measured_costs.reset();
  s.loss.reset();
  s.eval_loss.reset();
  s.ranks.clear();
  EXPECT_EQ(RunMonitor::IterationLogLine(s), "iteration 12: bubble 11.8% (predicted 9.0%)");
}

}  // namespace
}  // namespace zpipe::coordinator
