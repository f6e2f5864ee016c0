// LayoutFromProfile: the cuts of a profiled TorchScript model, balanced over the ranks or kept
// from the checkpoint the job resumes, and the errors that fail the job.
#include "coordinator/model_profiling.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

std::shared_ptr<const JobPlan> TwoStagePlan() {
  JobSpec s;
  s.model = SyntheticConfig{1, 1, 1, 16, 8};
  s.pipeline = 2;
  s.schedule = "1f1b";
  s.microbatches = 4;
  s.microbatch_size = 1;
  s.iterations = 1;
  return *PlanJob(s);
}

std::vector<BlockProfileData> Blocks(const std::vector<double>& forward_ms) {
  std::vector<BlockProfileData> blocks;
  for (double f : forward_ms) blocks.push_back(BlockProfileData{f, 2 * f, f, 1024, 1e6});
  return blocks;
}

TEST(LayoutFromProfileTest, BalancesTheRanksMeasuredCosts) {
  std::shared_ptr<const JobPlan> plan = TwoStagePlan();
  absl::StatusOr<ModelLayout> layout =
      LayoutFromProfile(Blocks({1, 1, 1, 3}), {}, plan.get(), "model.torchscript");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->source, "measured");
  EXPECT_EQ(layout->cuts, std::vector<int>({3}));
  EXPECT_EQ(layout->blocks, 4);
  ASSERT_EQ(layout->stages.size(), 2u);
  EXPECT_EQ(layout->stages[0].end_block, 3);
  EXPECT_DOUBLE_EQ(layout->stages[0].forward_ms, 3);
  EXPECT_DOUBLE_EQ(layout->stages[1].forward_ms, 3);
  EXPECT_DOUBLE_EQ(layout->stages[1].activation_kb, 1);
}

TEST(LayoutFromProfileTest, KeepsTheCheckpointsCutsWhenTheyFitThePlan) {
  std::shared_ptr<const JobPlan> plan = TwoStagePlan();
  absl::StatusOr<ModelLayout> layout =
      LayoutFromProfile(Blocks({1, 1, 1, 3}), {1}, plan.get(), "model.torchscript");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->source, "checkpoint");
  EXPECT_EQ(layout->cuts, std::vector<int>({1}));

  absl::StatusOr<ModelLayout> wrong =
      LayoutFromProfile(Blocks({1, 1, 1, 3}), {1, 2}, plan.get(), "model.torchscript");
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong.status()));
  EXPECT_EQ(wrong.status().message(), "the checkpoint to resume has 3 stages, this job 2");
}

TEST(LayoutFromProfileTest, FewerBlocksThanStagesFailTheJob) {
  std::shared_ptr<const JobPlan> plan = TwoStagePlan();
  absl::StatusOr<ModelLayout> layout =
      LayoutFromProfile(Blocks({1}), {}, plan.get(), "model.torchscript");
  EXPECT_TRUE(absl::IsFailedPrecondition(layout.status()));
  EXPECT_EQ(layout.status().message().rfind("model.torchscript: ", 0), 0u) << layout.status();
  // A Python model's blocks are cut the same way; the reason names its field.
  layout = LayoutFromProfile(Blocks({1}), {}, plan.get(), "model.python");
  EXPECT_EQ(layout.status().message().rfind("model.python: ", 0), 0u) << layout.status();
}

}  // namespace
}  // namespace zpipe::coordinator
