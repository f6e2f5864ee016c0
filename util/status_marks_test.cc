#include "util/status_marks.h"

#include <gtest/gtest.h>

namespace zpipe::util {
namespace {

constexpr absl::string_view kA = "zeropipe.dev/test-a";
constexpr absl::string_view kB = "zeropipe.dev/test-b";

TEST(StatusMarksTest, AMarkRidesOnTheStatusAndAnOkStatusTakesNone) {
  absl::Status st = WithMark(absl::UnavailableError("recv: peer closed"), kA);
  EXPECT_TRUE(HasMark(st, kA));
  EXPECT_FALSE(HasMark(st, kB));
  EXPECT_FALSE(HasMark(WithMark(absl::OkStatus(), kA), kA));
}

TEST(StatusMarksTest, RewordingKeepsCodeAndMarksWhereRebuildingLosesThem) {
  const absl::Status st = WithMark(WithMark(absl::DeadlineExceededError("no bytes"), kA), kB);
  const absl::Status reworded = Reworded(st, "rank 0: receiving gradient: no bytes");
  EXPECT_EQ(reworded.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(reworded.message(), "rank 0: receiving gradient: no bytes");
  EXPECT_TRUE(HasMark(reworded, kA));
  EXPECT_TRUE(HasMark(reworded, kB));
  const absl::Status rebuilt(st.code(), "rank 0: " + std::string(st.message()));
  EXPECT_FALSE(HasMark(rebuilt, kA));  // why Reworded exists
}

}  // namespace
}  // namespace zpipe::util
