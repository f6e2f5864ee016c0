// What `zpipe`'s command table (command_table.h) is made of, and the parser made from it.
//
// A command is a CommandSpec: its synopsis, what its --help says, and its flags (FlagSpec), each
// with its spellings, what its value is (for completion) and its description. Args turns a
// CommandSpec into a CLI11 app (flags/flags.h) and parses a command line with it; its Help() is
// the command's `--help`, generated from the same FlagSpecs that completion reads. No protobuf
// here: the local `zpipe plan` (plan_command.cc, core only) builds its parser from it too.
#ifndef ZPIPE_CLIENT_COMMAND_SPEC_H_
#define ZPIPE_CLIENT_COMMAND_SPEC_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::cli {

// What a flag's value, or a command's positional, is: completion offers matching words.
enum class ValueKind {
  kNone,     // a switch: no value
  kText,     // free text: nothing to offer
  kFile,     // a file name
  kDir,      // a folder
  kJobFile,  // a job file (*.yaml, *.yml, *.json)
  kJobId,    // a job id, asked from the coordinator (`zpipe list -o name`)
  kContext,  // a context name of the config file (`zpipe config get-contexts -o name`)
  kChoice,   // one of FlagSpec::choices
};

struct FlagSpec {
  absl::string_view name = {};        // "--file"
  absl::string_view short_name = {};  // "-f", or ""
  ValueKind value = ValueKind::kNone;
  absl::string_view choices = {};  // kChoice: space-separated words
  absl::string_view help = {};     // one line: completion's description (zsh, fish) and --help's
  // Still accepted for one release, with a warning naming `replacement`; not offered by
  // completion, not shown by --help.
  absl::string_view deprecated_for = {};
  // What --help calls the value ("R", "WHEN"); "" = from `value` (FILE, DIR, ID, ...).
  absl::string_view value_name = {};
  // --help only: more about the flag after `help` (defaults, details), wrapped beside it.
  absl::string_view more = {};
};

struct CommandSpec {
  absl::string_view name = {};
  absl::string_view synopsis =
      {};  // after "zpipe ": `zpipe --help`'s line, the command's usage line
  absl::string_view summary = {};          // one line
  ValueKind operand = ValueKind::kNone;    // what its positionals are, for completion
  absl::string_view operand_choices = {};  // operand == kChoice: the words (subcommands, shells)
  std::vector<FlagSpec> flags = {};
  // The -o formats it prints besides text (space-separated: "wide json yaml name").
  absl::string_view formats = {};
  // --help: what the command does, between the usage line and the flags; and notes after them.
  absl::string_view description = {};
  absl::string_view notes = {};
};

// One command's command line, parsed by CLI11 from its CommandSpec. Every spelling of a flag
// (`-f`, `--file`) answers under the long name; a deprecated spelling adds a warning; "--help" or
// "-h" before "--" ends the parse (help()). Values are read after the parse, as text or checked
// here (Integer) with a message naming the spelling that was used.
class Args {
 public:
  Args();  // no flags
  // `group` heads the flags in --help ("flags:").
  explicit Args(const CommandSpec& command, absl::string_view group = "flags");
  Args(Args&&) noexcept;
  Args& operator=(Args&&) noexcept;
  ~Args();

  // Parses `args` (the command name excluded); INVALID_ARGUMENT naming an unknown flag (and the
  // closest known one), a missing value or a value given to a switch.
  absl::Status Parse(const std::vector<std::string>& args);
  // Takes this command's flags out of `args` and leaves the rest, in order, in `rest`: unknown
  // flags, positionals, "--" and what follows it. With `leading_only` it stops at the first
  // argument that is none of its flags (zpipe's global flags before the command).
  absl::Status Extract(const std::vector<std::string>& args, bool leading_only,
                       std::vector<std::string>* rest);
  // "-f is deprecated ...: use --follow" for each deprecated spelling used.
  const std::vector<std::string>& warnings() const;

  bool help() const;
  bool Has(const std::string& name) const;
  // The value of `name` (the last, if given more than once; "true" for a switch).
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // Every value given to `name`, in any of its spellings: a repeatable flag (--label a=1
  // --label b=2).
  std::vector<std::string> GetAll(const std::string& name) const;
  // How `name` was given last ("-m" or "--microbatches"); `name` when it was not.
  std::string Spelling(const std::string& name) const;
  // Get(name) as a whole number in [min, max] (flags/values.h IntegerIn); INVALID_ARGUMENT
  // "SPELLING: want an integer >= 0, got 'x'".
  absl::StatusOr<int64_t> Integer(const std::string& name, int64_t min,
                                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  const std::vector<std::string>& positionals() const;

  // The command's --help, generated from its CommandSpec; and its "usage: zpipe ..." line.
  std::string Help() const;
  std::string UsageLine() const;
  // Only the flags' entries of Help().
  std::string OptionsHelp() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The --help entries of `flags` under the heading `group` (as a command's --help lists its own):
// `zpipe --help`'s global options.
std::string FlagsHelp(const std::vector<FlagSpec>& flags, absl::string_view group);

// The text --help and completion call a flag's value when the FlagSpec names none: FILE, DIR,
// ID, NAME, the choices joined by '|', VALUE.
std::string ValueName(const FlagSpec& flag);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_COMMAND_SPEC_H_
