// The services' log lines: each binary's form, a peer's string in a coordinator message cannot
// break the line or reach the operator's terminal as a control sequence, and the sink sees every
// line as given.
#include "util/log.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace zpipe {
namespace {

// Restores the process-wide settings a test changed.
class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetLogFormat({});
    SetMinLogLevel(LogLevel::kInfo);
    SetLogSink(nullptr);
  }
};

TEST_F(LogTest, PeerStringsAreEscapedAndTheLineStaysOne) {
  ::testing::internal::CaptureStderr();
  LogWarning("worker ", "evil\x1b[2J", " lost: ", "bye\r\n2026-01-01T00:00:00.000Z E forged");
  const std::string written = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(written.find('\x1b'), std::string::npos) << written;
  EXPECT_EQ(written.find('\r'), std::string::npos) << written;
  ASSERT_EQ(written.find('\n'), written.size() - 1) << written;  // only the line's own end
  EXPECT_NE(written.find(" W worker evil\\x1b[2J lost: bye\\r\\n2026-01-01T00:00:00.000Z E "
                         "forged\n"),
            std::string::npos)
      << written;
}

TEST_F(LogTest, TheDefaultFormStartsWithTheUtcTimeAndTheLevel) {
  ::testing::internal::CaptureStderr();
  LogInfo("job ", "j1", ": PENDING -> RUNNING");
  LogError("cannot start");
  const std::string written = ::testing::internal::GetCapturedStderr();
  // "2026-01-01T00:00:00.123Z I job j1: PENDING -> RUNNING\n"
  const size_t first_end = written.find('\n');
  ASSERT_NE(first_end, std::string::npos) << written;
  const std::string first = written.substr(0, first_end);
  ASSERT_GT(first.size(), 24u) << first;
  EXPECT_EQ(first[4], '-');
  EXPECT_EQ(first[10], 'T');
  EXPECT_EQ(first[19], '.');
  EXPECT_EQ(first.substr(23), "Z I job j1: PENDING -> RUNNING");
  EXPECT_EQ(written.substr(first_end + 1 + 23), "Z E cannot start\n") << written;
}

TEST_F(LogTest, TheWorkerFormIsItsPrefixAndTheLineAsWritten) {
  SetLogFormat({.prefix = "zpipe-worker: ", .timestamp = false, .sanitize = false});
  ::testing::internal::CaptureStderr();
  Log("registered as w0");
  Log("rank 1 failed: shape\n  [2, 3] vs [2, 4]\t(tab kept)");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "zpipe-worker: registered as w0\n"
            "zpipe-worker: rank 1 failed: shape\n  [2, 3] vs [2, 4]\t(tab kept)\n");
}

struct Recorder : LogSink {
  void Write(absl::Time time, std::string_view line) override {
    EXPECT_NE(time, absl::InfinitePast());
    lines.emplace_back(line);
  }
  std::vector<std::string> lines;
};

TEST_F(LogTest, TheSinkGetsEveryLineAsGivenAndNothingBelowTheMinimumLevel) {
  Recorder recorder;
  SetLogSink(&recorder);
  SetMinLogLevel(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  LogInfo("dropped");
  LogWarning("kept \x1b[2J");
  Log("dropped too");
  SetLogSink(nullptr);
  LogError("after the sink");
  const std::string written = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(recorder.lines, std::vector<std::string>{"kept \x1b[2J"});
  EXPECT_EQ(written.find("dropped"), std::string::npos) << written;
  EXPECT_NE(written.find(" W kept \\x1b[2J\n"), std::string::npos) << written;
  EXPECT_NE(written.find(" E after the sink\n"), std::string::npos) << written;
}

}  // namespace
}  // namespace zpipe
