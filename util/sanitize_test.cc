#include "util/sanitize.h"

#include <gtest/gtest.h>

#include <string>

namespace zpipe::util {
namespace {

TEST(SanitizeForTerminalTest, PlainTextIsKept) {
  EXPECT_EQ(SanitizeForTerminal(""), "");
  EXPECT_EQ(SanitizeForTerminal("host-a/cuda0: rank 1 failed (loss is nan) \\n"),
            "host-a/cuda0: rank 1 failed (loss is nan) \\n");
}

TEST(SanitizeForTerminalTest, PrintableNonAsciiIsKeptByteForByte) {
  // Latin-1 range (2 bytes), CJK (3 bytes), an emoji (4 bytes), a combining accent.
  const std::string name = "caf\xc3\xa9-\xe8\xa8\x88\xe7\xae\x97-\xf0\x9f\x9a\x80-e\xcc\x81";
  EXPECT_EQ(SanitizeForTerminal(name), name);
  // U+00A0 is the first code point after the C1 block: printable.
  EXPECT_EQ(SanitizeForTerminal("\xc2\xa0"), "\xc2\xa0");
}

TEST(SanitizeForTerminalTest, EscapeSequencesAreShownNotActedOn) {
  EXPECT_EQ(SanitizeForTerminal("w0\x1b[2J"), "w0\\x1b[2J");                // clear screen
  EXPECT_EQ(SanitizeForTerminal("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");  // OSC title, BEL
  EXPECT_EQ(SanitizeForTerminal("ding\a"), "ding\\x07");
  EXPECT_EQ(SanitizeForTerminal(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(SanitizeForTerminal("back\bspace\x7f"), "back\\x08space\\x7f");
}

TEST(SanitizeForTerminalTest, LineBreaksAreEscapedSoNothingIsOverwrittenOrForged) {
  EXPECT_EQ(SanitizeForTerminal("loss 2.5\rloss 0.1"), "loss 2.5\\rloss 0.1");
  EXPECT_EQ(SanitizeForTerminal("ok\n2026-01-01T00:00:00.000Z E forged"),
            "ok\\n2026-01-01T00:00:00.000Z E forged");
  EXPECT_EQ(SanitizeForTerminal("\r\n"), "\\r\\n");
}

TEST(SanitizeForTerminalTest, TabIsKept) { EXPECT_EQ(SanitizeForTerminal("a\tb"), "a\tb"); }

TEST(SanitizeForTerminalTest, C1ControlsEncodedAsUtf8AreEscaped) {
  EXPECT_EQ(SanitizeForTerminal("x\xc2\x9b" "2Jy"), "x\\u009b2Jy");  // CSI
  EXPECT_EQ(SanitizeForTerminal("\xc2\x80\xc2\x9d\xc2\x9f"), "\\u0080\\u009d\\u009f");
}

TEST(SanitizeForTerminalTest, BidiOverridesAndLineSeparatorsAreEscaped) {
  EXPECT_EQ(SanitizeForTerminal("a\xe2\x80\xae" "cba"), "a\\u202ecba");  // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(SanitizeForTerminal("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");
  EXPECT_EQ(SanitizeForTerminal("a\xe2\x80\xa8" "b"), "a\\u2028b");
}

TEST(SanitizeForTerminalTest, InvalidUtf8BytesAreEscapedOneByOne) {
  EXPECT_EQ(SanitizeForTerminal("caf\xe9"), "caf\\xe9");              // Latin-1, not UTF-8
  EXPECT_EQ(SanitizeForTerminal("\x9b" "2J"), "\\x9b2J");             // a raw C1 byte
  EXPECT_EQ(SanitizeForTerminal("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(SanitizeForTerminal("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // overlong, 3 bytes
  EXPECT_EQ(SanitizeForTerminal("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(SanitizeForTerminal("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  EXPECT_EQ(SanitizeForTerminal("\xe8\xa8"), "\\xe8\\xa8");  // cut short at the end
  // A broken sequence does not swallow the valid character after it.
  EXPECT_EQ(SanitizeForTerminal("\xe8\xc3\xa9"), "\\xe8\xc3\xa9");
  EXPECT_EQ(SanitizeForTerminal("\xe8\x1b"), "\\xe8\\x1b");
}

}  // namespace
}  // namespace zpipe::util
