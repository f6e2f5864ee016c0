// The one table of `zpipe`'s commands and flags. The dispatcher (zpipe_main.cc) runs commands from
// it, `zpipe --help` lists it, every command's flag parser is made from it (ArgsFor), and
// `zpipe completion bash|zsh|fish` generates its scripts from it: a command or a flag added here
// is known to all four at once, and one missing here is known to none.
//
// The flag conventions every command follows (README "CLI"):
//   -o, --output FORMAT   only ever the output format: text, wide, json, yaml or name (the ones a
//                         command prints; `table` is the old name of text);
//   -f, --file FILE       a file a command writes or reads, where a positional does not say it
//                         (trace, export, plan); submit and run take their job file as a
//                         positional or with -f;
//   --follow              keep following (logs, submit); never -f.
#ifndef ZPIPE_CLIENT_COMMAND_TABLE_H_
#define ZPIPE_CLIENT_COMMAND_TABLE_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "client/cli.h"

namespace zpipe::cli {

// What a flag's value, or a command's positional, is: completion offers matching words.
enum class ValueKind {
  kNone,      // a switch: no value
  kText,      // free text: nothing to offer
  kFile,      // a file name
  kDir,       // a folder
  kJobFile,   // a job file (*.yaml, *.yml, *.json)
  kJobId,     // a job id, asked from the coordinator (`zpipe list -o name`)
  kContext,   // a context name of the config file (`zpipe config get-contexts -o name`)
  kChoice,    // one of FlagSpec::choices
};

struct FlagSpec {
  absl::string_view name;        // "--file"
  absl::string_view short_name;  // "-f", or ""
  ValueKind value = ValueKind::kNone;
  absl::string_view choices;     // kChoice: space-separated words
  absl::string_view help;        // one line for completion descriptions (zsh, fish)
  // Still accepted for one release, with a warning naming `replacement`; not offered by
  // completion.
  absl::string_view deprecated_for;
};

struct CommandSpec {
  absl::string_view name;
  absl::string_view synopsis;  // after "zpipe ", for `zpipe --help`
  absl::string_view summary;   // one line
  ValueKind operand = ValueKind::kNone;  // what its positionals are, for completion
  absl::string_view operand_choices;      // operand == kChoice: the words (subcommands, shells)
  std::vector<FlagSpec> flags;
  // The -o formats it prints besides text (space-separated: "wide json yaml name").
  absl::string_view formats;
  // nullptr: main runs it itself (it needs no coordinator: completion, version, config, help).
  int (*run)(CliContext& ctx, const std::vector<std::string>& args) = nullptr;
};

// Every command, in the order `zpipe --help` lists them.
const std::vector<CommandSpec>& Commands();
// The global flags (before or after the command).
const std::vector<FlagSpec>& GlobalFlags();
const CommandSpec* FindCommand(absl::string_view name);

// A parser for `command`'s flags (a FlagSpec with a short name answers to both spellings, stored
// under the long one).
Args ArgsFor(const CommandSpec& command);
Args ArgsFor(absl::string_view command);

// The closest of `candidates` to `typo` (edit distance at most 2, and less than half its length);
// nullopt when none is close. "sumbit" -> "submit".
std::optional<std::string> Suggest(absl::string_view typo,
                                   const std::vector<std::string>& candidates);

// -o FORMAT as an OutputFormat: "text" (or its old name "table"), "wide", "json", "yaml", "name".
std::optional<OutputFormat> ParseOutputFormat(absl::string_view name);
absl::string_view OutputFormatName(OutputFormat format);
// Whether `command` prints `format` (text always).
bool CommandPrints(const CommandSpec& command, OutputFormat format);

// `zpipe --help`, generated from the table.
std::string TopUsage();

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_COMMAND_TABLE_H_
