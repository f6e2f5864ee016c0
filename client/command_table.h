// The one table of `zpipe`'s commands and flags (CommandSpec, FlagSpec: command_spec.h). The
// dispatcher (dispatch.h) finds commands in it, `zpipe --help` lists it, every command's CLI11
// parser and its `--help` are made from it (Args), and `zpipe completion bash|zsh|fish` generates
// its scripts from it: a command or a flag added here is known to all four at once, and one
// missing here is known to none. It says what each command is, not how it runs: the functions
// that run the coordinator commands are cli.h's CommandRunner(), linked only into zpipe-remote,
// so the lean `zpipe` that answers --help, completion and the local plan loads no gRPC.
//
// The flag conventions every command follows (docs/guide.md "The `zpipe` CLI"):
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
#include <vector>

#include "absl/strings/string_view.h"
#include "client/cli_common.h"
#include "client/command_spec.h"
#include "flags/values.h"

namespace zpipe::cli {

// Every command, in the order `zpipe --help` lists them.
const std::vector<CommandSpec>& Commands();
// The global flags (before or after the command; --help and --version only before it).
const std::vector<FlagSpec>& GlobalFlags();
const CommandSpec* FindCommand(absl::string_view name);

// A parser for `command`'s flags (a FlagSpec with a short name answers to both spellings, stored
// under the long one); an empty one for a command the table does not have.
Args ArgsFor(const CommandSpec& command);
Args ArgsFor(absl::string_view command);

// The closest of `candidates` to `typo` (flags/values.h): "sumbit" -> "submit".
using flags::Suggest;

// -o FORMAT as an OutputFormat: "text" (or its old name "table"), "wide", "json", "yaml", "name".
std::optional<OutputFormat> ParseOutputFormat(absl::string_view name);
absl::string_view OutputFormatName(OutputFormat format);
// Whether `command` prints `format` (text always).
bool CommandPrints(const CommandSpec& command, OutputFormat format);

// `zpipe --help`, generated from the table: the commands, then the global flags.
std::string TopUsage();

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_COMMAND_TABLE_H_
