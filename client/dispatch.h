// How `zpipe`'s command line is split and which commands run without a coordinator. Shared by
// the two executables behind the one `zpipe` command:
//   zpipe         (zpipe_main.cc) the lean one users run: --help, --version, usage errors with
//                 their suggestions, `completion` and the local `plan` run here, loading neither
//                 gRPC, protobuf nor OpenSSL; every other command it hands, argv unchanged, to
//   zpipe-remote  (zpipe_remote_main.cc) beside it, which runs RunLocalCommand the same way and
//                 then the coordinator commands (CommandRunner, cli.h).
// Both parse with the same code, so a command line means the same whichever binary reads it.
// The global flags are the command table's (GlobalFlags()), parsed by CLI11 through Args: every
// one of them before the command, and all but --help and --version after it, wherever they stand
// among the command's own flags.
#ifndef ZPIPE_CLIENT_DISPATCH_H_
#define ZPIPE_CLIENT_DISPATCH_H_

#include <optional>
#include <string>
#include <vector>

#include "client/cli_config.h"
#include "client/command_spec.h"

namespace zpipe::cli {

struct Globals {
  ConnectionFlags connection;  // --context, --coordinator, --token-file, --tls-*
  std::optional<std::string> output;
  std::string output_flag;   // how `output` was given: "-o" or "--output"
  bool require_tls = false;  // --require-tls (or ZPIPE_REQUIRE_TLS=1)
};

// The command line once its command is known.
struct Invocation {
  std::string command;
  const CommandSpec* spec = nullptr;
  std::vector<std::string> args;  // after the command
  Globals globals;
};

enum class GlobalScope {
  kLeading,       // before the command: every global flag
  kAfterCommand,  // after it: all but --help and --version
  kOutputOnly,    // after `config` (the others are set-context's) and the local `plan`: -o
};

// Runs what needs no coordinator and returns its exit code: `zpipe --help`, `--version`,
// `help [COMMAND]`, a bad global flag, an unknown command or option (with the closest one),
// `completion` and the local `plan`. Otherwise returns nullopt with `inv` holding the command,
// its table entry, its arguments and the global flags given before it.
std::optional<int> RunLocalCommand(const std::vector<std::string>& argv, Invocation& inv);

// Takes the global flags `scope` allows out of `inv.args` into `inv.globals` (a value given after
// the command replaces one given before). An exit code after saying what is wrong.
std::optional<int> TakeGlobalsAfterCommand(Invocation& inv, GlobalScope scope);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_DISPATCH_H_
