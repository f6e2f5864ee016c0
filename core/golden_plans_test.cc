// Golden plans: the text form of every schedule at p = 4, m = 8 with unit costs, so a change to
// a generator shows up in review. Regenerate with ZPIPE_UPDATE_GOLDEN=1 after checking the new
// plans (zpipe plan --format ascii helps).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

std::string GoldenPath(ScheduleKind kind) {
  return std::string(ZPIPE_SOURCE_DIR) + "/core/testdata/golden/" +
         std::string(ScheduleName(kind)) + "_p4_m8.txt";
}

class GoldenPlanTest : public ::testing::TestWithParam<ScheduleKind> {};

TEST_P(GoldenPlanTest, MatchesGoldenFile) {
  const ScheduleKind kind = GetParam();
  ScheduleRequest req;
  req.pipeline = 4;
  req.microbatches = 8;
  req.cost = CostModel::Uniform(
      PlacementFor(kind, 4).num_stages(),
      StageCost{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5});
  auto plan = GenerateSchedule(kind, req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = std::nullopt}).ok());
  auto sim = Simulate(*plan, req.cost);
  ASSERT_TRUE(sim.ok());
  std::ostringstream text;
  text << "# " << ScheduleName(kind) << " p=4 m=8, unit costs: makespan " << sim->span
       << ", bubble " << sim->bubble_rate << "\n"
       << PlanToText(*plan);
  const std::string path = GoldenPath(kind);
  if (const char* update = std::getenv("ZPIPE_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path) << text.str();
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path << " (run with ZPIPE_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text.str(), want.str()) << "plan of " << ScheduleName(kind)
                                    << " changed; if intended, regenerate with "
                                       "ZPIPE_UPDATE_GOLDEN=1";
  auto parsed = ParsePlanText(want.str());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *plan);
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, GoldenPlanTest, ::testing::ValuesIn(AllScheduleKinds()),
                         [](const ::testing::TestParamInfo<ScheduleKind>& info) {
                           std::string name(ScheduleName(info.param));
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace zpipe::core
