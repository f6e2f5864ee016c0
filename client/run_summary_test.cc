#include "client/run_summary.h"

#include <gtest/gtest.h>

namespace zpipe::cli {
namespace {

v1::IterationSummary Iteration(int i, double duration, double bubble, double predicted,
                               std::optional<double> loss, std::vector<double> busy,
                               double reduce = 0, double exposed = 0) {
  v1::IterationSummary it;
  it.set_iteration(i);
  it.set_duration_s(duration);
  it.set_bubble_rate(bubble);
  it.set_predicted_bubble_rate(predicted);
  if (loss.has_value()) it.set_loss(*loss);
  for (size_t r = 0; r < busy.size(); ++r) {
    v1::RankIterationStats* s = it.add_ranks();
    s->set_pipeline_rank(static_cast<int>(r));
    s->set_busy_s(busy[r]);
    s->set_tokens(100);
    s->set_reduce_s(reduce / busy.size());
    s->set_exposed_reduce_s(exposed / busy.size());
    s->set_step_s(0.01 * (r + 1));
    s->set_overlapped_step_s(0.002 * i);
  }
  it.set_reduce_total_s(reduce);
  it.set_reduce_exposed_s(exposed);
  return it;
}

v1::Job Job() {
  v1::Job job;
  job.set_id("j1");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_spec()->mutable_schedule()->set_kind("zb-v");
  job.mutable_spec()->mutable_parallel()->set_pipeline(2);
  job.mutable_spec()->mutable_batch()->set_microbatches(4);
  job.mutable_predicted()->set_bubble_rate(0.05);
  job.mutable_predicted()->add_rank_bubble(0.04);
  job.mutable_predicted()->add_rank_bubble(0.06);
  job.mutable_predicted()->set_reduce_overlap(0.5);
  return job;
}

TEST(RunSummaryTest, SteadyStateSkipsTheFirstIterationAndTakesMedians) {
  // The first iteration (warm-up) is slow with a large bubble; iteration 3 is disturbed.
  std::vector<v1::IterationSummary> its = {Iteration(0, 5.0, 0.9, 0.05, 4.0, {0.5, 0.5}),
                                           Iteration(1, 1.0, 0.10, 0.05, 3.0, {0.9, 0.9}),
                                           Iteration(2, 1.0, 0.12, 0.05, 2.5, {0.9, 0.86}),
                                           Iteration(3, 2.0, 0.60, 0.05, 2.0, {0.8, 0.8})};
  RunSummary s = Summarize(Job(), its);
  EXPECT_EQ(s.state, "succeeded");
  EXPECT_EQ(s.iterations, 4);
  EXPECT_EQ(s.steady_iterations, 3);
  EXPECT_DOUBLE_EQ(*s.loss_first, 4.0);
  EXPECT_DOUBLE_EQ(*s.loss_last, 2.0);
  EXPECT_DOUBLE_EQ(s.bubble_measured, 0.12);
  EXPECT_DOUBLE_EQ(s.bubble_predicted, 0.05);
  EXPECT_DOUBLE_EQ(s.iteration_s, 1.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 600 / 4.0);  // 2 ranks x 100 tokens x 3 iterations over 4 s
  ASSERT_EQ(s.ranks.size(), 2u);
  // Per rank: 1 - busy / iteration span, median over iterations 2..4: {0.1, 0.1, 0.6} and {0.1,
  // 0.14, 0.6}.
  EXPECT_NEAR(s.ranks[0].bubble_measured, 0.1, 1e-9);
  EXPECT_NEAR(s.ranks[1].bubble_measured, 0.14, 1e-9);
  EXPECT_DOUBLE_EQ(s.ranks[0].bubble_predicted, 0.04);
  EXPECT_DOUBLE_EQ(s.ranks[1].bubble_predicted, 0.06);
  EXPECT_FALSE(s.reduce_overlap.has_value());  // nothing reduced
  // The optimizer step per iteration, mean over iterations 1..3 (overlapped: 0.002 i).
  EXPECT_NEAR(s.ranks[0].step_s, 0.01, 1e-12);
  EXPECT_NEAR(s.ranks[1].step_s, 0.02, 1e-12);
  EXPECT_NEAR(s.ranks[1].overlapped_step_s, 0.004, 1e-12);
}

TEST(RunSummaryTest, PredictionAtMeasuredCostsIsTheMedianOfTheIterationsThatHaveIt) {
  std::vector<v1::IterationSummary> its = {Iteration(0, 5.0, 0.9, 0.05, 4.0, {0.5, 0.5}),
                                           Iteration(1, 1.0, 0.10, 0.05, 3.0, {0.9, 0.9}),
                                           Iteration(2, 1.0, 0.12, 0.05, 2.5, {0.9, 0.86}),
                                           Iteration(3, 1.0, 0.11, 0.05, 2.0, {0.9, 0.9})};
  EXPECT_FALSE(Summarize(Job(), its).bubble_predicted_measured_costs.has_value());
  its[0].set_predicted_bubble_measured_costs(0.5);  // the warm-up: not a steady iteration
  its[1].set_predicted_bubble_measured_costs(0.08);
  its[3].set_predicted_bubble_measured_costs(0.09);
  RunSummary s = Summarize(Job(), its);
  ASSERT_TRUE(s.bubble_predicted_measured_costs.has_value());
  EXPECT_DOUBLE_EQ(*s.bubble_predicted_measured_costs, 0.085);
  EXPECT_DOUBLE_EQ(s.bubble_predicted, 0.05);
}

TEST(RunSummaryTest, ReduceOverlapIsOneMinusExposedOverTotal) {
  std::vector<v1::IterationSummary> its = {
      Iteration(0, 1, 0.1, 0.1, std::nullopt, {0.9, 0.9}, 1.0, 1.0),
      Iteration(1, 1, 0.1, 0.1, std::nullopt, {0.9, 0.9}, 1.0, 0.1),
      Iteration(2, 1, 0.1, 0.1, std::nullopt, {0.9, 0.9}, 1.0, 0.3)};
  RunSummary s = Summarize(Job(), its);
  EXPECT_FALSE(s.loss_first.has_value());
  ASSERT_TRUE(s.reduce_overlap.has_value());
  EXPECT_NEAR(*s.reduce_overlap, 0.8, 1e-9);
  EXPECT_NEAR(s.reduce_total_s, 1.0, 1e-9);
  EXPECT_NEAR(s.reduce_exposed_s, 0.2, 1e-9);
  EXPECT_DOUBLE_EQ(s.reduce_overlap_predicted, 0.5);
}

TEST(RunSummaryTest, OneIterationIsItsOwnSteadyState) {
  RunSummary s = Summarize(Job(), {Iteration(0, 2, 0.3, 0.2, 1.5, {1.4, 1.4})});
  EXPECT_EQ(s.steady_iterations, 1);
  EXPECT_DOUBLE_EQ(s.bubble_measured, 0.3);
  EXPECT_DOUBLE_EQ(s.bubble_predicted, 0.2);
}

TEST(RunSummaryTest, SyntheticModelsHaveNoLoss) {
  v1::Job job = Job();
  job.mutable_spec()->mutable_model()->mutable_synthetic()->set_forward_ms(1);
  v1::IterationSummary it = Iteration(0, 2, 0.3, 0.2, 1.5, {1.4, 1.4});
  it.clear_loss();
  RunSummary s = Summarize(job, {it});
  EXPECT_TRUE(s.synthetic);
  EXPECT_FALSE(s.loss_first.has_value());
  EXPECT_FALSE(Summarize(Job(), {}).synthetic);
}

TEST(RunSummaryTest, NoIterationsFallsBackToThePlansPrediction) {
  RunSummary s = Summarize(Job(), {});
  EXPECT_EQ(s.steady_iterations, 0);
  EXPECT_DOUBLE_EQ(s.bubble_predicted, 0.05);
  EXPECT_TRUE(s.ranks.empty());
}

}  // namespace
}  // namespace zpipe::cli
