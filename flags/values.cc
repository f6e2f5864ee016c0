#include "flags/values.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zpipe::flags {
namespace {

constexpr std::pair<absl::string_view, int64_t> kSizeUnits[] = {
    {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10}};

// Optimal string alignment distance: edits, with a swap of neighbours counting one.
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string Got(const std::string& value) { return absl::StrCat(", got '", value, "'"); }

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  double seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtod(text, &seconds) && !std::isnan(seconds)) return absl::Seconds(seconds);
  if (absl::ParseDuration(text, &d)) return d;
  // Days, which abseil lacks ("7d", "1d12h"): retention is counted in them.
  if (const size_t at = text.find('d'); at != absl::string_view::npos && at > 0) {
    double days = 0;
    absl::Duration rest = absl::ZeroDuration();
    if (absl::SimpleAtod(text.substr(0, at), &days) && std::isfinite(days) && days >= 0 &&
        (at + 1 == text.size() || absl::ParseDuration(text.substr(at + 1), &rest))) {
      return absl::Hours(24) * days + rest;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("want a duration (e.g. 10s, 500ms)", Got(std::string(text))));
}

absl::StatusOr<int64_t> ParseSize(absl::string_view text) {
  int64_t unit = 1;
  absl::string_view number = text;
  for (const auto& [suffix, bytes] : kSizeUnits) {
    if (absl::ConsumeSuffix(&number, suffix)) {
      unit = bytes;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(number, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("want a positive size (e.g. 16MiB)", Got(std::string(text))));
  }
  if (n > std::numeric_limits<int64_t>::max() / unit) {
    return absl::OutOfRangeError(absl::StrCat("size too large", Got(std::string(text))));
  }
  return n * unit;
}

std::string FormatSize(int64_t bytes) {
  for (const auto& [suffix, unit] : kSizeUnits) {
    if (bytes > 0 && bytes % unit == 0) return absl::StrCat(bytes / unit, suffix);
  }
  return absl::StrCat(bytes, " bytes");
}

Check DurationIn(absl::Duration min, absl::Duration max) {
  return [min, max](const std::string& value) -> std::string {
    absl::StatusOr<absl::Duration> d = ParseDuration(value);
    if (!d.ok()) return std::string(d.status().message());
    if (*d < min || *d > max) {
      return absl::StrCat("must be ", absl::FormatDuration(min), "..", absl::FormatDuration(max),
                          Got(value));
    }
    return "";
  };
}

Check PositiveDuration() {
  return [](const std::string& value) -> std::string {
    absl::StatusOr<absl::Duration> d = ParseDuration(value);
    if (!d.ok()) return std::string(d.status().message());
    if (*d <= absl::ZeroDuration()) return absl::StrCat("want a duration above 0", Got(value));
    return "";
  };
}

Check SizeAtMost(int64_t max) {
  return [max](const std::string& value) -> std::string {
    absl::StatusOr<int64_t> n = ParseSize(value);
    if (n.ok() && *n <= max) return "";
    if (!n.ok() && absl::IsInvalidArgument(n.status())) return std::string(n.status().message());
    return absl::StrCat("want a positive size of at most ", FormatSize(max), Got(value));
  };
}

Check IntegerIn(int64_t min, int64_t max) {
  return [min, max](const std::string& value) -> std::string {
    int64_t n = 0;
    if (absl::SimpleAtoi(value, &n) && n >= min && n <= max) return "";
    if (max == std::numeric_limits<int64_t>::max()) {
      return absl::StrCat("want an integer >= ", min, Got(value));
    }
    return absl::StrCat("want an integer in [", min, ", ", max, "]", Got(value));
  };
}

Check Number() {
  return [](const std::string& value) -> std::string {
    double v = 0;
    if (absl::SimpleAtod(value, &v) && std::isfinite(v)) return "";
    return absl::StrCat("want a number", Got(value));
  };
}

Check OneOf(absl::string_view words) {
  std::vector<std::string> allowed = absl::StrSplit(words, ' ', absl::SkipEmpty());
  return [allowed](const std::string& value) -> std::string {
    if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return "";
    std::string list = absl::StrJoin(allowed.begin(), allowed.end() - 1, ", ");
    absl::StrAppend(&list, allowed.size() > 1 ? " or " : "", allowed.back());
    return absl::StrCat("want ", list, Got(value));
  };
}

int64_t IntegerValue(const std::string& value) {
  int64_t n = 0;
  (void)absl::SimpleAtoi(value, &n);
  return n;
}

double NumberValue(const std::string& value) {
  double v = 0;
  (void)absl::SimpleAtod(value, &v);
  return v;
}

std::optional<std::string> Suggest(absl::string_view typo,
                                   const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const size_t d = Distance(typo, c);
    if (d < best_distance && 2 * d < typo.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  for (std::string line; std::getline(in, line);) {
    absl::string_view token = absl::StripAsciiWhitespace(line);
    if (!token.empty() && token[0] != '#') return std::string(token);
  }
  return "";
}

}  // namespace zpipe::flags
