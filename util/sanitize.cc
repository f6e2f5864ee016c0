#include "util/sanitize.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace zpipe::util {
namespace {

// One well-formed UTF-8 sequence: its length in bytes (0 when `text` does not start with one)
// and its code point.
struct Utf8Char {
  size_t length = 0;
  uint32_t code = 0;
};

// The well-formed sequence at the start of `text` (the Unicode Standard, table 3-7): no overlong
// forms, no surrogates, nothing above U+10FFFF. `text` is not empty.
Utf8Char DecodeUtf8(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {1, lead};
  size_t length = 0;
  uint32_t code = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;  // the first continuation byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // above U+10FFFF
  } else {
    return {};
  }
  if (text.size() < length) return {};
  for (size_t i = 1; i < length; ++i) {
    const unsigned char b = byte(i);
    if (b < (i == 1 ? second_min : 0x80) || b > (i == 1 ? second_max : 0xBF)) return {};
    code = (code << 6) | (b & 0x3F);
  }
  return {length, code};
}

// Non-ASCII code points that steer the terminal or the order text is shown in.
bool IsNonAsciiControl(uint32_t code) {
  return (code >= 0x80 && code <= 0x9F) || code == 0x2028 || code == 0x2029 ||
         (code >= 0x202A && code <= 0x202E) || (code >= 0x2066 && code <= 0x2069);
}

}  // namespace

std::string SanitizeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const Utf8Char c = DecodeUtf8(text);
    if (c.length == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if (c.code == '\n') {
      out += "\\n";
    } else if (c.code == '\r') {
      out += "\\r";
    } else if ((c.code < 0x20 && c.code != '\t') || c.code == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c.code);
    } else if (IsNonAsciiControl(c.code)) {
      absl::StrAppendFormat(&out, "\\u%04x", c.code);
    } else {
      out.append(text.data(), c.length);
    }
    text.remove_prefix(c.length);
  }
  return out;
}

}  // namespace zpipe::util
