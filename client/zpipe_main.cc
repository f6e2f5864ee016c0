// The `zpipe` command line. Subcommands live in their own files; this file only resolves the
// global options and dispatches. The global flags are the command table's (GlobalFlags()), parsed
// by CLI11 through Args: every one of them before the command, and all but --help and --version
// after it, wherever they stand among the command's own flags.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/cli_config.h"
#include "client/command_table.h"
#include "client/plan_command.h"
#include "client/trace_command.h"
#include "flags/values.h"

namespace zpipe::cli {
namespace {

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

Args GlobalArgs(GlobalScope scope) {
  CommandSpec spec;
  for (const FlagSpec& f : GlobalFlags()) {
    const bool before_only = f.name == "--help" || f.name == "--version";
    if (scope == GlobalScope::kLeading || f.name == "--output" ||
        (scope == GlobalScope::kAfterCommand && !before_only)) {
      spec.flags.push_back(f);
    }
  }
  return Args(spec);
}

// What `args` holds into `globals`; a value given after the command replaces one given before.
void Collect(const Args& args, Globals& globals) {
  ConnectionFlags& c = globals.connection;
  for (auto [name, out] :
       {std::pair{"--context", &c.context}, std::pair{"--coordinator", &c.coordinator},
        std::pair{"--token-file", &c.token_file}, std::pair{"--tls-ca", &c.tls_ca},
        std::pair{"--tls-cert", &c.tls_cert}, std::pair{"--tls-key", &c.tls_key}}) {
    if (args.Has(name)) *out = args.Get(name);
  }
  if (args.Has("--output")) {
    globals.output = args.Get("--output");
    globals.output_flag = args.Spelling("--output");
  }
  globals.require_tls = globals.require_tls || args.Has("--require-tls");
}

std::vector<std::string> Names(const std::vector<FlagSpec>& flags) {
  std::vector<std::string> names;
  for (const FlagSpec& f : flags) names.emplace_back(f.name);
  return names;
}

// "zpipe: unknown command 'sumbit'; did you mean 'submit'?" and where to look, in two lines.
int Unknown(const std::string& what, const std::string& word,
            const std::vector<std::string>& candidates) {
  std::optional<std::string> near = Suggest(word, candidates);
  std::cerr << "zpipe: unknown " << what << " '" << word << "'"
            << (near ? "; did you mean '" + *near + "'?" : "") << "\n"
            << "Run 'zpipe --help' for the commands and options.\n";
  return kExitUsage;
}

// The global flags before the command, then the command: `zpipe --help`, `--version` and
// `help [COMMAND]` are answered here.
std::optional<int> SplitCommandLine(const std::vector<std::string>& argv, Invocation& inv) {
  Args leading = GlobalArgs(GlobalScope::kLeading);
  std::vector<std::string> rest;
  if (absl::Status s = leading.Extract(argv, /*leading_only=*/true, &rest); !s.ok()) {
    std::cerr << "zpipe: " << s.message() << "\nRun 'zpipe --help' for the commands and options.\n";
    return kExitUsage;
  }
  Collect(leading, inv.globals);
  if (leading.Has("--help") || (rest.size() == 1 && rest[0] == "help")) {
    std::cout << TopUsage();
    return kExitOk;
  }
  if (leading.Has("--version")) {
    std::cout << ClientVersionLine() << "\n";
    return kExitOk;
  }
  if (rest.empty()) {
    std::cerr << TopUsage();
    return kExitUsage;
  }
  if (rest[0] == "help") rest = {rest[1], "--help"};  // zpipe help COMMAND
  inv.command = rest[0];
  inv.args.assign(rest.begin() + 1, rest.end());
  if (inv.command.size() > 1 && inv.command[0] == '-') {
    return Unknown("option", inv.command.substr(0, inv.command.find('=')), Names(GlobalFlags()));
  }
  inv.spec = FindCommand(inv.command);
  if (inv.spec == nullptr) {
    std::vector<std::string> names;
    for (const CommandSpec& c : Commands()) names.emplace_back(c.name);
    return Unknown("command", inv.command, names);
  }
  return std::nullopt;
}

// One release of grace for the old spelling of a file: on a command that writes a file (trace,
// export, the local plan), `-o VALUE` / `--output VALUE` after the command whose VALUE is no
// output format is `--file VALUE`, with a warning. Whether `after` held such a -o.
bool TakeDeprecatedFileFlag(const std::string& command, const Args& after,
                            std::vector<std::string>& args) {
  if (command != "trace" && command != "export" && command != "plan") return false;
  if (!after.Has("--output") || ParseOutputFormat(after.Get("--output")).has_value()) return false;
  std::cerr << "zpipe " << command << ": warning: " << after.Spelling("--output")
            << " FILE is deprecated and goes away in the next release: use -f FILE (--file); "
               "-o is the output format on every command\n";
  args.insert(args.end(), {"--file", after.Get("--output")});
  return true;
}

// The global flags after the command, taken out of its arguments.
std::optional<int> TakeGlobalsAfterCommand(Invocation& inv, GlobalScope scope) {
  Args after = GlobalArgs(scope);
  std::vector<std::string> rest;
  if (absl::Status s = after.Extract(inv.args, /*leading_only=*/false, &rest); !s.ok()) {
    std::cerr << "zpipe " << inv.command << ": " << s.message() << "\n";
    return kExitUsage;
  }
  inv.args = std::move(rest);
  const std::optional<std::string> output = inv.globals.output;
  const std::string output_flag = inv.globals.output_flag;
  Collect(after, inv.globals);
  if (TakeDeprecatedFileFlag(inv.command, after, inv.args)) {
    inv.globals.output = output;  // that -o was a file, not the format
    inv.globals.output_flag = output_flag;
  }
  return std::nullopt;
}

// Whether `zpipe plan ARGS` shows a job's plan (--job) rather than planning here. A --job without
// its value counts: the job plan's parser says what is missing.
bool AsksForAJobsPlan(const std::vector<std::string>& args) {
  Args job(CommandSpec{.flags = {{.name = "--job", .value = ValueKind::kJobId}}});
  std::vector<std::string> rest;
  return !job.Extract(args, /*leading_only=*/false, &rest).ok() || job.Has("--job");
}

// The local `zpipe plan` parses its own flags (-o text|json, -f FILE, ...): a -o given before
// the command means the same there as after it.
int RunLocalPlan(Invocation& inv) {
  if (std::optional<int> exit = TakeGlobalsAfterCommand(inv, GlobalScope::kOutputOnly)) {
    return *exit;
  }
  if (inv.globals.output.has_value()) {
    inv.args.insert(inv.args.begin(), {inv.globals.output_flag, *inv.globals.output});
  }
  return RunPlanCommand(inv.args, std::cout, std::cerr);
}

// -o as this command prints it: wide is text with more columns where a command has them, text
// elsewhere; a format the command does not print is a usage error.
std::optional<int> ResolveOutput(const Invocation& inv, OutputFormat& output) {
  output = OutputFormat::kTable;
  if (inv.globals.output.has_value()) {
    std::optional<OutputFormat> parsed = ParseOutputFormat(*inv.globals.output);
    if (!parsed.has_value()) {
      std::cerr << "zpipe: " << inv.globals.output_flag
                << " takes text, wide, json, yaml or name (the output format), got '"
                << *inv.globals.output << "'; files are -f FILE\n";
      return kExitUsage;
    }
    output = *parsed;
  }
  if (output == OutputFormat::kWide && !CommandPrints(*inv.spec, output)) {
    output = OutputFormat::kTable;
  }
  if (!CommandPrints(*inv.spec, output)) {
    std::cerr << "zpipe " << inv.command << ": -o " << OutputFormatName(output) << ": "
              << inv.command << " prints " << (inv.spec->formats.empty() ? "text only" : "text, ")
              << inv.spec->formats << "\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// The token for `connection`: ZPIPE_TOKEN's, or the first line of its token file. False after
// saying why when the file holds none.
bool SetToken(const Connection& connection, CliContext& ctx) {
  if (!connection.token.value.empty()) {
    ctx.SetToken(connection.token.value, connection.token.source);
    return true;
  }
  if (connection.token_file.value.empty()) return true;
  const std::string& file = connection.token_file.value;
  absl::StatusOr<std::string> token = flags::ReadTokenFile(file);
  if (!token.ok() || token->empty()) {
    std::cerr << "zpipe: " << connection.token_file.source << ": "
              << (token.ok() ? "no token in " : "cannot read ") << file << "\n";
    return false;
  }
  ctx.SetToken(*token, connection.token_file.source + " " + file);
  return true;
}

// TLS for `connection`, and the refusal (--require-tls) or warning for a token in plaintext.
bool SetTls(const Connection& connection, bool require_tls, CliContext& ctx) {
  // A file nobody set is named by its flag, so "--tls-cert F needs --tls-key too" says what to add.
  auto named = [](const Setting& s, const char* flag) {
    return util::NamedFile{s.value.empty() ? std::string(flag) : s.source, s.value};
  };
  const util::NamedFile ca = named(connection.tls_ca, "--tls-ca");
  auto tls = util::LoadTlsClientPem(ca, named(connection.tls_cert, "--tls-cert"),
                                    named(connection.tls_key, "--tls-key"));
  if (!tls.ok()) {
    std::cerr << "zpipe: " << tls.status().message() << "\n";
    return false;
  }
  const bool has_tls = tls->has_value();
  ctx.SetTls(*std::move(tls), ca.path.empty() ? "" : ca.source + " " + ca.path);
  if (std::string problem = util::PlaintextTokenProblem(
          "zpipe", connection.coordinator.value, ctx.has_token(), has_tls, require_tls, "--tls-ca");
      !problem.empty()) {
    std::cerr << problem << "\n";
    if (require_tls) return false;
  }
  return true;
}

// The coordinator to talk to and how, from the flags, the environment and the config file.
std::optional<int> Connect(const Globals& globals, OutputFormat output, bool terminal,
                           std::optional<CliContext>& ctx) {
  const std::string config_path = ConfigPath(ProcessEnv());
  absl::StatusOr<CliConfig> config = LoadCliConfig(config_path);
  if (!config.ok()) {
    std::cerr << "zpipe: " << config.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<Connection> connection =
      ResolveConnection(globals.connection, ProcessEnv(), *config, config_path);
  if (!connection.ok()) {
    std::cerr << "zpipe: " << connection.status().message() << "\n";
    return kExitUsage;
  }
  ctx.emplace(connection->coordinator.value, output, std::cout, std::cerr, terminal);
  const char* require_env = std::getenv("ZPIPE_REQUIRE_TLS");
  const bool require_tls =
      globals.require_tls || (require_env != nullptr && std::string(require_env) == "1");
  if (!SetToken(*connection, *ctx) || !SetTls(*connection, require_tls, *ctx)) return kExitUsage;
  return std::nullopt;
}

int Main(const std::vector<std::string>& argv) {
  Invocation inv;
  if (std::optional<int> exit = SplitCommandLine(argv, inv)) return *exit;
  if (inv.command == "completion") return RunCompletionCommand(inv.args, std::cout, std::cerr);
  if (inv.command == "plan" && !AsksForAJobsPlan(inv.args)) return RunLocalPlan(inv);
  const GlobalScope scope =
      inv.command == "config" ? GlobalScope::kOutputOnly : GlobalScope::kAfterCommand;
  if (std::optional<int> exit = TakeGlobalsAfterCommand(inv, scope)) return *exit;
  OutputFormat output;
  if (std::optional<int> exit = ResolveOutput(inv, output)) return *exit;
  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDOUT_FILENO) && !(term != nullptr && std::string(term) == "dumb");
  // `COMMAND --help` only prints the usage: a token, TLS or config file it cannot read is no
  // error then; zpipe config reads its file itself.
  if (flags::WantsHelp(inv.args) || inv.command == "config") {
    CliContext ctx(kDefaultCoordinator, output, std::cout, std::cerr, terminal);
    return inv.spec->run(ctx, inv.args);
  }
  std::optional<CliContext> ctx;
  if (std::optional<int> exit = Connect(inv.globals, output, terminal, ctx)) return *exit;
  SilenceGrpcLogging();  // Fail() prints each error in one line
  return inv.spec->run(*ctx, inv.args);
}

}  // namespace
}  // namespace zpipe::cli

int main(int argc, char** argv) {
  return zpipe::cli::Main(std::vector<std::string>(argv + 1, argv + argc));
}
