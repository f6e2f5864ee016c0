#include "worker/executor/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace zpipe::worker {
namespace {

TEST(LrScheduleTest, WarmupThenCosineMatchesTheFormula) {
  auto s = LrSchedule::Make(1e-3, 4, "cosine", 1e-4, 20);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->At(0), 1e-3 * 1 / 4);
  EXPECT_DOUBLE_EQ(s->At(3), 1e-3);
  EXPECT_DOUBLE_EQ(s->At(4), 1e-3);  // cos(0): the peak
  const int t = 11;
  EXPECT_DOUBLE_EQ(s->At(t),
                   1e-4 + (1e-3 - 1e-4) * 0.5 * (1 + std::cos(std::numbers::pi * (t - 4) / 16.0)));
  EXPECT_GT(s->At(19), 1e-4);
  EXPECT_LT(s->At(19), s->At(18));
}

TEST(LrScheduleTest, LinearAndConstant) {
  auto lin = LrSchedule::Make(2.0, 0, "linear", 0.0, 10);
  ASSERT_TRUE(lin.ok());
  EXPECT_DOUBLE_EQ(lin->At(0), 2.0);
  EXPECT_DOUBLE_EQ(lin->At(5), 1.0);
  auto c = LrSchedule::Make(0.5, 2, "", 0.0, 10);
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->At(0), 0.25);
  EXPECT_DOUBLE_EQ(c->At(9), 0.5);
}

TEST(LrScheduleTest, UnknownDecayIsNamed) {
  auto s = LrSchedule::Make(1.0, 0, "exp", 0.0, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("lr_schedule.decay"), std::string::npos);
}

}  // namespace
}  // namespace zpipe::worker
