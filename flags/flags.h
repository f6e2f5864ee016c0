// How every ZeroPipe binary defines and parses its flags: CLI11 (Debian's libcli11-dev), set up
// the same way everywhere.
//
// A program (or one `zpipe` command) is a CLI::App made by NewApp: its flags are CLI11 options
// with a description each, and `--help` is generated from them by HelpFormatter (the usage line,
// a description, every flag with its value name and description, a footer). Values are checked by
// the shared checks of values.h (durations, sizes, bounded integers), attached with Add* below or
// CLI11's own `->check(...)`. Parse runs CLI11 under ZeroPipe's rules:
//   - "--name VALUE", "--name=VALUE" (also an empty "--name="), "-n VALUE", "-nVALUE";
//   - a flag given twice: the last one wins;
//   - "--" ends the flags: what follows is positional;
//   - --help / -h anywhere before "--" wins over everything else on the line (WantsHelp);
//   - one error line that names the flag and what it wants: "unknown option '--folow'; did you
//     mean '--follow'?", "--tail: want an integer >= 0, got '-1'", "--rank needs a value".
// ParseMain wraps that for main(): the help on stdout and exit 0, or the error, the usage line and
// where to read more on stderr and exit 2.
#ifndef ZPIPE_FLAGS_FLAGS_H_
#define ZPIPE_FLAGS_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "flags/values.h"

namespace zpipe::flags {

// `--help` text: "usage: USAGE", the app's description, then each option group ("flags:",
// "limits (...):"; options in group "" are hidden) with one entry per flag, "-f, --file FILE" (or
// the option's option_text) and its description wrapped beside it, then the app's footer.
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override;
  // "usage: USAGE\n".
  std::string UsageLine() const;

 private:
  std::string usage_;
};

// An app named `name` ("zpipe-coordinator", "zpipe logs") whose help starts "usage: `usage`".
// Options added later take the last of repeated values, and a switch takes no "=VALUE".
std::unique_ptr<CLI::App> NewApp(const std::string& name, const std::string& usage,
                                 const std::string& description = "");

// The app's help text, as `--help` prints it.
std::string Help(const CLI::App& app);
// Only its flags: each group's heading and entries.
std::string OptionsHelp(const CLI::App& app);
// "usage: ...\n" alone, for error messages.
std::string UsageLine(const CLI::App& app);

// Parses `args` (the program name excluded) into `app`. Arguments that are no flag go to
// `positionals` in order; with `positionals` null any is an error ("unexpected argument 'x'").
// INVALID_ARGUMENT with the one-line messages above. Does not look for --help: call WantsHelp.
absl::Status Parse(CLI::App& app, const std::vector<std::string>& args,
                   std::vector<std::string>* positionals = nullptr);

// Parses the flags of `app` out of `args` and leaves everything else in `rest`, in order (unknown
// flags, positionals, "--" and what follows it): for flags that share a command line with others
// (zpipe's global flags). With `leading_only` it stops at the first argument that is none of its
// flags. INVALID_ARGUMENT as Parse for its own flags (a missing value).
absl::Status ParseKnown(CLI::App& app, const std::vector<std::string>& args, bool leading_only,
                        std::vector<std::string>* rest);

// main()'s parse: with --help prints Help(app) to `out` and returns 0; on a bad flag prints
// "NAME: PROBLEM", the usage line and "Run 'NAME --help' for its flags." to `err` and returns 2;
// nullopt when the program should go on.
std::optional<int> ParseMain(CLI::App& app, const std::vector<std::string>& args, std::ostream& out,
                             std::ostream& err, std::vector<std::string>* positionals = nullptr);
// argv[1..] as strings.
std::vector<std::string> Args(int argc, char** argv);

// A flag taking a value checked by `check` and handed to `set` once it passed (once per time the
// flag is given, so the last one wins). `value_name` is what --help shows ("DURATION").
CLI::Option* AddChecked(CLI::App& app, const std::string& name, const std::string& value_name,
                        const std::string& description, Check check,
                        std::function<void(const std::string&)> set);
// A duration (values.h ParseDuration) within [min, max].
CLI::Option* AddDuration(CLI::App& app, const std::string& name, absl::Duration* out,
                         const std::string& description, absl::Duration min = absl::Nanoseconds(1),
                         absl::Duration max = absl::InfiniteDuration());
// A size (values.h ParseSize) of at most `max` bytes.
template <typename T>
CLI::Option* AddSize(CLI::App& app, const std::string& name, T* out, int64_t max,
                     const std::string& description) {
  return AddChecked(app, name, "SIZE", description, SizeAtMost(max),
                    [out](const std::string& v) { *out = static_cast<T>(*ParseSize(v)); });
}
// A whole number in [min, max].
template <typename T>
CLI::Option* AddInteger(CLI::App& app, const std::string& name, T* out, int64_t min, int64_t max,
                        const std::string& description, const std::string& value_name = "N") {
  return AddChecked(app, name, value_name, description, IntegerIn(min, max),
                    [out](const std::string& v) { *out = static_cast<T>(IntegerValue(v)); });
}
// A finite number.
CLI::Option* AddNumber(CLI::App& app, const std::string& name, double* out,
                       const std::string& description);
// A text value (an address, a path); `value_name` as --help shows it ("HOST:PORT", "FILE").
CLI::Option* AddText(CLI::App& app, const std::string& name, std::string* out,
                     const std::string& value_name, const std::string& description);
// A text value handed to `set` (the last one, when the flag is given more than once).
CLI::Option* AddValue(CLI::App& app, const std::string& name, const std::string& value_name,
                      const std::string& description, std::function<void(const std::string&)> set);
// A repeatable flag: every value, in order, appended to `out`.
CLI::Option* AddList(CLI::App& app, const std::string& name, std::vector<std::string>* out,
                     const std::string& value_name, const std::string& description);
// A switch: `*out` becomes true when it is given.
CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool* out,
                       const std::string& description);

}  // namespace zpipe::flags

#endif  // ZPIPE_FLAGS_FLAGS_H_
