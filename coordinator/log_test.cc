// The coordinator's log lines: a peer's string in a message cannot break the line or reach the
// operator's terminal as a control sequence.
#include "coordinator/log.h"

#include <string>

#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

TEST(LogTest, PeerStringsAreEscapedAndTheLineStaysOne) {
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

}  // namespace
}  // namespace zpipe::coordinator
