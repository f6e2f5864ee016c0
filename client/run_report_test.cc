#include "client/run_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace zpipe::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A finished p = 2 job: d = 2 with two steady iterations, reductions and an optimizer step
// (after the last reduction and, on data rank 1, partly bucket by bucket), or d = 1 and nothing
// of either (a synthetic model).
RunSummary Finished(bool data_parallel) {
  RunSummary s;
  s.job_id = "j";
  s.state = "succeeded";
  s.schedule = "zb-v";
  s.pipeline = 2;
  s.data = data_parallel ? 2 : 1;
  s.microbatches = 8;
  s.iterations = 3;
  s.steady_iterations = 2;
  s.synthetic = !data_parallel;
  s.iteration_s = 0.5;
  s.bubble_measured = 0.1;
  s.bubble_predicted = 0.05;
  for (int dr = 0; dr < s.data; ++dr) {
    for (int pr = 0; pr < s.pipeline; ++pr) {
      RankSummary r{.pipeline_rank = pr,
                    .data_rank = dr,
                    .bubble_measured = 0.1,
                    .bubble_predicted = 0.05,
                    .busy_s = 0.45};
      if (data_parallel) {
        r.reduce_s = 0.2;  // two iterations: 100 ms each
        r.exposed_reduce_s = 0.02;
        r.step_s = dr == 0 ? 0.028 : 0.004;
        r.overlapped_step_s = dr == 0 ? 0 : 0.026;
      }
      s.ranks.push_back(r);
    }
  }
  if (data_parallel) {
    s.reduce_total_s = 0.4;
    s.reduce_exposed_s = 0.04;
    s.reduce_overlap = 0.9;
  }
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The table row whose first two cells are `pr` and `dr`, split into cells.
std::vector<std::string> Row(const std::string& text, int pr, int dr) {
  for (const std::string& line : Lines(text)) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.size() > 2 && words[0] == std::to_string(pr) && words[1] == std::to_string(dr)) {
      return words;
    }
  }
  return {};
}

TEST(RunReportTest, TheRankTableShowsReduceAndStepColumnsForADataParallelJob) {
  std::ostringstream out;
  PrintSummary(out, Finished(true), TimelineFiles{});
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("reduce        400.0 ms per iteration (all ranks), overlap 90.0%"));
  EXPECT_THAT(text, HasSubstr("REDUCE"));
  EXPECT_THAT(text, HasSubstr("EXPOSED"));
  EXPECT_THAT(text, HasSubstr("STEP OVERLAPPED"));
  // Cells, whitespace-split: rank, dp, busy "450.0 ms", bubble, predicted, reduce and exposed per
  // iteration, then the step after the last reduction and the overlapped one.
  EXPECT_THAT(Row(text, 1, 0),
              ::testing::ElementsAre("1", "0", "450.0", "ms", "10.0%", "5.0%", "100.0", "ms",
                                     "10.0", "ms", "28.0", "ms", "0.0", "ms"))
      << text;
  EXPECT_THAT(Row(text, 0, 1),
              ::testing::ElementsAre("0", "1", "450.0", "ms", "10.0%", "5.0%", "100.0", "ms",
                                     "10.0", "ms", "4.0", "ms", "26.0", "ms"))
      << text;
}

TEST(RunReportTest, ASyntheticSingleReplicaJobHasNeitherReduceNorStepColumns) {
  std::ostringstream out;
  PrintSummary(out, Finished(false), TimelineFiles{});
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("loss          none (a synthetic model computes no loss)"));
  EXPECT_THAT(text, HasSubstr("RANK"));
  EXPECT_THAT(text, Not(HasSubstr("REDUCE")));
  EXPECT_THAT(text, Not(HasSubstr("STEP")));
  EXPECT_THAT(text, Not(HasSubstr("reduce        ")));
  EXPECT_EQ(Row(text, 1, 0).size(), 5u + 1) << text;  // busy is two words
}

TEST(RunReportTest, AStepAfterTheLastReductionOnlyHasNoOverlappedColumn) {
  RunSummary s = Finished(true);
  for (RankSummary& r : s.ranks) r.overlapped_step_s = 0;
  std::ostringstream out;
  PrintSummary(out, s, TimelineFiles{});
  EXPECT_THAT(out.str(), HasSubstr("STEP"));
  EXPECT_THAT(out.str(), Not(HasSubstr("OVERLAPPED")));
}

TEST(RunReportTest, JsonCarriesEveryRanksStepAndNullOverlapWithoutReductions) {
  const nlohmann::json dp = SummaryJson(Finished(true), TimelineFiles{});
  ASSERT_EQ(dp["ranks"].size(), 4u);
  EXPECT_DOUBLE_EQ(dp["ranks"][3]["step_s"].get<double>(), 0.004);
  EXPECT_DOUBLE_EQ(dp["ranks"][3]["overlapped_step_s"].get<double>(), 0.026);
  EXPECT_DOUBLE_EQ(dp["reduce"]["overlap"].get<double>(), 0.9);
  const nlohmann::json single = SummaryJson(Finished(false), TimelineFiles{});
  EXPECT_TRUE(single["reduce"]["overlap"].is_null()) << single.dump(2);
  EXPECT_EQ(single["timeline"]["iteration"].get<int>(), -1);
}

TEST(RunReportTest, SaysWhenComputeThreadsOutnumberTheCores) {
  RunSummary s = Finished(false);
  s.local_threads = 4;
  s.cores = 2;
  std::ostringstream out;
  PrintSummary(out, s, TimelineFiles{});
  EXPECT_THAT(out.str(), HasSubstr("4 compute threads share 2 cores here")) << out.str();
  const nlohmann::json j = SummaryJson(s, TimelineFiles{});
  EXPECT_EQ(j["machine"]["cores"].get<int>(), 2);
  EXPECT_EQ(j["machine"]["compute_threads"].get<int>(), 4);

  EXPECT_TRUE(j["bubble"]["predicted_measured_costs"].is_null());
  s.bubble_predicted_measured_costs = 0.178;
  std::ostringstream measured;
  PrintSummary(measured, s, TimelineFiles{});
  EXPECT_THAT(measured.str(), HasSubstr("17.8% predicted at measured costs")) << measured.str();
  EXPECT_DOUBLE_EQ(SummaryJson(s, TimelineFiles{})["bubble"]["predicted_measured_costs"], 0.178);

  s.cores = 8;
  std::ostringstream enough;
  PrintSummary(enough, s, TimelineFiles{});
  EXPECT_THAT(enough.str(), Not(HasSubstr("share"))) << enough.str();
}

}  // namespace
}  // namespace zpipe::cli
