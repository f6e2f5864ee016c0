// The values of command-line flags, read one way by every ZeroPipe binary (zpipe,
// zpipe-coordinator, zpipe-worker, the benchmarks): durations, sizes, bounded numbers, the token
// file. A flag definition names one of the checks below (flags.h attaches it to the parser), so
// `--heartbeat-timeout 10s` on the coordinator and `--reconnect-max-backoff 500ms` on the worker
// are the same grammar with the same error messages.
//
// No CLI11 here: the command table of `zpipe` (client/command_spec.h) names these checks in every
// command's file without pulling the parser into each of them.
#ifndef ZPIPE_FLAGS_VALUES_H_
#define ZPIPE_FLAGS_VALUES_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace zpipe::flags {

// What is wrong with a flag's value, as the rest of the sentence after the flag's name
// ("want an integer >= 0, got '-1'"), or "" when nothing is. The parser prefixes the name:
// "--tail: want an integer >= 0, got '-1'".
using Check = std::function<std::string(const std::string& value)>;

// A duration: Go/abseil syntax ("10s", "500ms", "1m30s", "inf"), days before it ("7d", "1d12h")
// or a bare number of seconds ("1.5"). INVALID_ARGUMENT "want a duration (e.g. 10s, 500ms), got 'x'".
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);
// A size: bytes ("1048576") or a whole number of KiB, MiB or GiB ("16MiB"); positive.
// INVALID_ARGUMENT "want a positive size (e.g. 16MiB), got 'x'"; OUT_OF_RANGE past int64.
absl::StatusOr<int64_t> ParseSize(absl::string_view text);
// "16MiB" for 16 << 20, "1000 bytes" when no unit divides it: sizes in messages.
std::string FormatSize(int64_t bytes);

// Durations in [min, max] (both inclusive).
Check DurationIn(absl::Duration min, absl::Duration max = absl::InfiniteDuration());
// A positive duration (what every timeout and interval flag takes).
Check PositiveDuration();
// Sizes of at most `max` bytes.
Check SizeAtMost(int64_t max);
// Whole numbers in [min, max]; the message shows ">= min" when max is the type's limit.
Check IntegerIn(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());
// A finite number: "want a number, got 'x'".
Check Number();
// One of `words` (space-separated): "--format: want chrome or svg, got 'png'".
Check OneOf(absl::string_view words);

// The value of a flag Check accepted, converted (for flags bound without CLI11's own types).
int64_t IntegerValue(const std::string& value);
double NumberValue(const std::string& value);

// The closest of `candidates` to `typo` (edit distance at most 2, and less than half its length);
// nullopt when none is close. "sumbit" -> "submit", "--folow" -> "--follow".
std::optional<std::string> Suggest(absl::string_view typo,
                                   const std::vector<std::string>& candidates);

// Whether `args` ask for help: --help or -h before any "--" (every binary answers it first,
// whatever else is on the line).
bool WantsHelp(const std::vector<std::string>& args);

// --token-file FILE: the first line of FILE that is not blank or a # comment, without the
// whitespace around it; "" when there is none (callers say "no token in FILE"). NOT_FOUND when
// FILE cannot be read.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace zpipe::flags

#endif  // ZPIPE_FLAGS_VALUES_H_
