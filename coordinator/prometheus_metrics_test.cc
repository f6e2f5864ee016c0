#include "coordinator/prometheus_metrics.h"

#include <gtest/gtest.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "zpipe/build_info.h"

namespace zpipe::coordinator {
namespace {

class PrometheusMetricsTest : public ::testing::Test {
 protected:
  std::string Text() {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_.Collect());
    return out.str();
  }
  // The value of the sample `series` ("name{labels}" exactly as serialised), or -1.
  double Sample(const std::string& series) {
    const std::string text = Text();
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, series + " ")) {
        double v;
        if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
      }
    }
    return -1;
  }
  static RankStats Stats(int pipeline_rank, double scale = 1) {
    RankStats s;
    s.pipeline_rank = pipeline_rank;
    s.duration_s = 1.0 * scale;
    s.forward_s = 0.2 * scale;
    s.backward_s = 0.3 * scale;
    s.weight_s = 0.25 * scale;
    s.busy_s = 0.75 * scale;
    s.idle_s = 0.25 * scale;
    s.bubble_ratio = 0.25;
    s.reduce_s = 0.1 * scale;
    s.exposed_reduce_s = 0.02 * scale;
    s.p2p_wait_s = 0.05 * scale;
    s.tokens = 512;
    s.step_s = 0.03 * scale;
    s.overlapped_step_s = 0.01 * scale;
    return s;
  }

  prometheus::Registry registry_;
};

constexpr char kRank0[] = "{data_rank=\"0\",job_id=\"j\",pipeline_rank=\"0\"}";

// The info-metric idiom: one series at 1 naming the build (cmake/build_info.cmake).
TEST_F(PrometheusMetricsTest, BuildInfoIsOneSeriesAtOneNamingTheBuild) {
  PrometheusMetrics m(registry_);
  EXPECT_EQ(Sample(absl::StrCat("zpipe_build_info{commit=\"", build_info::kCommit, "\",cuda=\"",
                                build_info::kCuda, "\",torch=\"", build_info::kTorch,
                                "\",version=\"", build_info::kVersion, "\"}")),
            1);
  EXPECT_FALSE(std::string(build_info::kVersion).empty());
}

TEST_F(PrometheusMetricsTest, RankReportsAccumulateOncePerIteration) {
  PrometheusMetrics m(registry_);
  m.ObserveRankIteration("j", 0, Stats(0));
  m.ObserveRankIteration("j", 0, Stats(0));  // duplicate: ignored
  m.ObserveRankIteration("j", 1, Stats(0));
  EXPECT_DOUBLE_EQ(
      Sample("zpipe_busy_seconds_total{data_rank=\"0\",job_id=\"j\",op=\"W\",pipeline_rank=\"0\"}"),
      0.5);
  EXPECT_DOUBLE_EQ(
      Sample("zpipe_busy_seconds_total{data_rank=\"0\",job_id=\"j\",op=\"F\",pipeline_rank=\"0\"}"),
      0.4);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_idle_seconds_total") + kRank0), 0.5);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_bubble_ratio") + kRank0), 0.25);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_reduce_seconds_total") + kRank0), 0.2);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_exposed_reduce_seconds_total") + kRank0), 0.04);
  EXPECT_NEAR(Sample(std::string("zpipe_reduce_overlap_ratio") + kRank0), 0.8, 1e-12);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_p2p_wait_seconds_total") + kRank0), 0.1);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_rank_iterations_total") + kRank0), 2);
  EXPECT_DOUBLE_EQ(Sample(std::string("zpipe_tokens_total") + kRank0), 1024);
  EXPECT_DOUBLE_EQ(Sample("zpipe_step_seconds_total{data_rank=\"0\",job_id=\"j\",phase=\"after_"
                          "reduce\",pipeline_rank=\"0\"}"),
                   0.06);
  EXPECT_DOUBLE_EQ(
      Sample("zpipe_step_seconds_total{data_rank=\"0\",job_id=\"j\",phase=\"overlapped\","
             "pipeline_rank=\"0\"}"),
      0.02);
  EXPECT_FALSE(absl::StrContains(Text(), "iteration=")) << Text();
}

TEST_F(PrometheusMetricsTest, JobIterationsSetBubblesLossAndHistogram) {
  PrometheusMetrics m(registry_);
  IterationSummary s;
  s.iteration = 0;
  s.duration_s = 0.3;
  s.bubble_rate = 0.2;
  s.reduce_total_s = 1;
  s.reduce_exposed_s = 0.25;
  s.loss = 3.5;
  s.eval_loss = 4.25;
  s.ranks = {Stats(0), Stats(1)};
  m.ObserveJobIteration("j", s, PredictedBubble{0.15, {0.1, 0.2}});
  m.ObserveJobIteration("j", s, PredictedBubble{0.9, {0.9, 0.9}});  // same iteration: ignored
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_bubble_ratio{job_id=\"j\"}"), 0.2);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_bubble_ratio_predicted{job_id=\"j\"}"), 0.15);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_reduce_overlap_ratio{job_id=\"j\"}"), 0.75);
  EXPECT_DOUBLE_EQ(Sample("zpipe_loss{job_id=\"j\"}"), 3.5);
  EXPECT_DOUBLE_EQ(Sample("zpipe_eval_loss{job_id=\"j\"}"), 4.25);
  EXPECT_DOUBLE_EQ(Sample("zpipe_iterations_total{job_id=\"j\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_iteration_duration_seconds_count{job_id=\"j\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_iteration_duration_seconds_bucket{job_id=\"j\",le=\"0.5\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_iteration_duration_seconds_bucket{job_id=\"j\",le=\"0.25\"}"), 0);
  EXPECT_DOUBLE_EQ(
      Sample("zpipe_bubble_ratio_predicted{data_rank=\"0\",job_id=\"j\",pipeline_rank=\"1\"}"),
      0.2);
}

TEST_F(PrometheusMetricsTest, PlanSwitchesCountByPhaseAndSetTheVersion) {
  PrometheusMetrics m(registry_, {absl::Minutes(10), 100});
  m.ObservePlanSwitch("j", "scheduled", 0);
  m.ObservePlanSwitch("j", "applied", 1);
  m.ObservePlanSwitch("j", "scheduled", 1);
  m.ObservePlanSwitch("j", "abandoned", 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_plan_version{job_id=\"j\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_plan_switches_total{job_id=\"j\",phase=\"scheduled\"}"), 2);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_plan_switches_total{job_id=\"j\",phase=\"applied\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_plan_switches_total{job_id=\"j\",phase=\"abandoned\"}"), 1);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  m.JobFinished("j", JobState::kSucceeded, t0);
  m.ExpireJobs(t0 + absl::Minutes(11));
  EXPECT_FALSE(absl::StrContains(Text(), "job_id=\"j\"")) << Text();
}

TEST_F(PrometheusMetricsTest, FinishedJobsExpireAfterRetention) {
  PrometheusMetrics m(registry_, {absl::Minutes(10), 100});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  m.ObserveRankIteration("j", 0, Stats(0));
  m.JobFinished("j", JobState::kSucceeded, t0);
  m.ExpireJobs(t0 + absl::Minutes(9));
  EXPECT_EQ(m.exported_jobs(), 1);
  EXPECT_GT(Sample(std::string("zpipe_idle_seconds_total") + kRank0), 0);
  m.ExpireJobs(t0 + absl::Minutes(11));
  EXPECT_EQ(m.exported_jobs(), 0);
  EXPECT_FALSE(absl::StrContains(Text(), "job_id=\"j\"")) << Text();
  m.ObserveRankIteration("j", 1, Stats(0));  // late: does not come back
  EXPECT_FALSE(absl::StrContains(Text(), "job_id=\"j\"")) << Text();
  EXPECT_TRUE(absl::StrContains(Text(), "zpipe_jobs{state=\"running\"}"));
}

TEST_F(PrometheusMetricsTest, AtMostMaxFinishedJobsAreKept) {
  PrometheusMetrics m(registry_, {absl::Hours(1), 2});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (const char* id : {"a", "b", "c", "running"}) m.ObserveRankIteration(id, 0, Stats(0));
  m.JobFinished("a", JobState::kSucceeded, t0);
  m.JobFinished("b", JobState::kFailed, t0);
  m.JobFinished("c", JobState::kCancelled, t0);
  EXPECT_EQ(m.exported_jobs(), 3);  // b, c and the running one
  EXPECT_FALSE(absl::StrContains(Text(), "job_id=\"a\""));
  EXPECT_TRUE(absl::StrContains(Text(), "job_id=\"running\""));
}

// An alert can name the job that ended and how (ZPipeJobFailed fires on zpipe_job_state), also
// for a job that failed before it reported an iteration; restarts are counted per job. Both go
// with the job's other series.
TEST_F(PrometheusMetricsTest, JobStateAndRestartsAreLabelledWithTheJob) {
  PrometheusMetrics m(registry_, {absl::Minutes(10), 100});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  m.ObserveRankIteration("ran", 0, Stats(0));
  m.JobRestarted("ran");
  m.JobRestarted("ran");
  m.JobFinished("ran", JobState::kFailed, t0);
  m.JobFinished("never-ran", JobState::kFailed, t0);
  m.JobFinished("cancelled", JobState::kCancelled, t0);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_restarts_total{job_id=\"ran\"}"), 2);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_state{job_id=\"ran\",state=\"failed\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_state{job_id=\"never-ran\",state=\"failed\"}"), 1);
  EXPECT_DOUBLE_EQ(Sample("zpipe_job_state{job_id=\"cancelled\",state=\"cancelled\"}"), 1);
  // A job with only its state has no iteration series (ZPipeIterationStalled would see a counter
  // that never moves), and a late report does not start them.
  m.ObserveRankIteration("never-ran", 0, Stats(0));
  EXPECT_FALSE(absl::StrContains(Text(), "zpipe_iterations_total{job_id=\"never-ran\"}"));
  EXPECT_FALSE(absl::StrContains(Text(), "job_id=\"never-ran\",pipeline_rank"));
  m.ExpireJobs(t0 + absl::Minutes(11));
  EXPECT_EQ(m.exported_jobs(), 0);
  EXPECT_FALSE(absl::StrContains(Text(), "zpipe_job_state{")) << Text();
  EXPECT_FALSE(absl::StrContains(Text(), "zpipe_job_restarts_total{")) << Text();
}

}  // namespace
}  // namespace zpipe::coordinator
