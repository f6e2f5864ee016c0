// The `zpipe` command line. Subcommands live in their own files; this file only resolves the
// global options and dispatches.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/cli_config.h"
#include "client/command_table.h"
#include "client/plan_command.h"
#include "client/trace_command.h"

namespace {

// `zpipe --help`: the command table's usage (command_table.cc TopUsage), then the exit codes.
constexpr char kExitCodes[] =
    "\n"
    "exit codes: 0 success; 1 job failed or cancelled, or the operation was refused (also a\n"
    "            missing or refused token);\n"
    "            2 usage error or invalid job spec; 3 coordinator unreachable;\n"
    "            4 the coordinator refused for lack of resources (its job store is full,\n"
    "            or --max-pending-jobs reached): retry later\n";

struct GlobalOptions {
  std::optional<std::string> context;
  std::optional<std::string> coordinator;
  std::optional<std::string> output;
  std::string output_flag;  // how `output` was given: "-o" or "--output"
  std::optional<std::string> token_file;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  bool require_tls = false;  // --require-tls (or ZPIPE_REQUIRE_TLS=1)
};

// The first line of `path` that is not blank or a # comment; "" when there is none.
std::optional<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  for (std::string line; std::getline(in, line);) {
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    return line.substr(begin, line.find_last_not_of(" \t\r") + 1 - begin);
  }
  return "";
}

// Removes --context / --coordinator / -o / --output / --token-file / --tls-* (with their values)
// from `args`; only -o / --output with `output_only` (zpipe config has the others as its own).
// Returns an error message, or "" when all is well.
std::string ExtractGlobals(std::vector<std::string>& args, GlobalOptions& globals,
                           bool leading_only, bool output_only = false) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::optional<std::string>* target = nullptr;
    std::string name = a;
    std::optional<std::string> value;
    if (size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (name == "-o" || name == "--output") target = &globals.output;
    if (!output_only && a == "--require-tls") {  // a switch: no value
      globals.require_tls = true;
      continue;
    }
    if (!output_only) {
      if (name == "--context") target = &globals.context;
      if (name == "--coordinator") target = &globals.coordinator;
      if (name == "--token-file") target = &globals.token_file;
      if (name == "--tls-ca") target = &globals.tls_ca;
      if (name == "--tls-cert") target = &globals.tls_cert;
      if (name == "--tls-key") target = &globals.tls_key;
    }
    if (target == nullptr) {
      if (leading_only) {
        rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
        break;
      }
      rest.push_back(a);
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= args.size()) return name + " needs a value";
      value = args[++i];
    }
    *target = *value;
    if (target == &globals.output) globals.output_flag = name;
  }
  args = std::move(rest);
  return "";
}

bool HasJobFlag(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--job" || a.rfind("--job=", 0) == 0) return true;
  }
  return false;
}

// One release of grace for the old spelling of a file: on a command that writes a file (trace,
// export, the local plan), `-o VALUE` / `--output VALUE` whose VALUE is no output format becomes
// `--file VALUE`, with a warning.
void RewriteDeprecatedFileFlags(const std::string& command, std::vector<std::string>& args) {
  if (command != "trace" && command != "export" && command != "plan") return;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos && name.rfind("--", 0) == 0) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name != "-o" && name != "--output") continue;
    if (!value.has_value()) {
      if (i + 1 >= args.size()) return;
      value = args[i + 1];
    }
    if (zpipe::cli::ParseOutputFormat(*value).has_value()) continue;
    std::cerr << "zpipe " << command << ": warning: " << name
              << " FILE is deprecated and goes away in the next release: use -f FILE (--file); "
                 "-o is the output format on every command\n";
    if (args[i].find('=') != std::string::npos) {
      args[i] = "--file=" + *value;
    } else {
      args[i] = "--file";
    }
  }
}

std::vector<std::string> Names(const std::vector<zpipe::cli::FlagSpec>& flags) {
  std::vector<std::string> names;
  for (const zpipe::cli::FlagSpec& f : flags) names.emplace_back(f.name);
  return names;
}

// "zpipe: unknown command 'sumbit'; did you mean 'submit'?" and where to look, in two lines.
int Unknown(const std::string& what, const std::string& word,
            const std::vector<std::string>& candidates) {
  std::optional<std::string> near = zpipe::cli::Suggest(word, candidates);
  std::cerr << "zpipe: unknown " << what << " '" << word << "'"
            << (near ? "; did you mean '" + *near + "'?" : "") << "\n"
            << "Run 'zpipe --help' for the commands and options.\n";
  return zpipe::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zpipe::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  GlobalOptions globals;
  const std::string usage = TopUsage() + kExitCodes;
  if (std::string error = ExtractGlobals(args, globals, /*leading_only=*/true); !error.empty()) {
    std::cerr << "zpipe: " << error << "\nRun 'zpipe --help' for the commands and options.\n";
    return kExitUsage;
  }
  if (args.empty() || args[0] == "-h" || args[0] == "--help" ||
      (args[0] == "help" && args.size() == 1)) {
    (args.empty() ? std::cerr : std::cout) << usage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    std::cout << ClientVersionLine() << "\n";
    return kExitOk;
  }
  if (args[0] == "help") args = {args[1], "--help"};  // zpipe help COMMAND
  const std::string command = args[0];
  args.erase(args.begin());
  if (command.size() > 1 && command[0] == '-') {
    return Unknown("option", command.substr(0, command.find('=')), Names(GlobalFlags()));
  }
  const CommandSpec* spec = FindCommand(command);
  if (spec == nullptr) {
    std::vector<std::string> names;
    for (const CommandSpec& c : Commands()) names.emplace_back(c.name);
    return Unknown("command", command, names);
  }
  if (command == "completion") return RunCompletionCommand(args, std::cout, std::cerr);
  RewriteDeprecatedFileFlags(command, args);
  // The local `zpipe plan` parses its own flags (-o text|json, -f FILE, ...); a -o given before
  // the command means the same there as after it.
  if (command == "plan" && !HasJobFlag(args)) {
    if (globals.output.has_value()) {
      args.insert(args.begin(), {globals.output_flag, *globals.output});
    }
    return RunPlanCommand(args, std::cout, std::cerr);
  }
  if (std::string error = ExtractGlobals(args, globals, /*leading_only=*/false,
                                         /*output_only=*/command == "config");
      !error.empty()) {
    std::cerr << "zpipe " << command << ": " << error << "\n";
    return kExitUsage;
  }
  OutputFormat output = OutputFormat::kTable;
  if (globals.output.has_value()) {
    std::optional<OutputFormat> parsed = ParseOutputFormat(*globals.output);
    if (!parsed.has_value()) {
      std::cerr << "zpipe: " << globals.output_flag
                << " takes text, wide, json, yaml or name (the output format), got '"
                << *globals.output << "'; files are -f FILE\n";
      return kExitUsage;
    }
    output = *parsed;
  }
  // wide is text with more columns where a command has them, text elsewhere.
  if (output == OutputFormat::kWide && !CommandPrints(*spec, output)) output = OutputFormat::kTable;
  if (!CommandPrints(*spec, output)) {
    std::cerr << "zpipe " << command << ": -o " << OutputFormatName(output) << ": " << command
              << " prints " << (spec->formats.empty() ? "text only" : "text, ") << spec->formats
              << "\n";
    return kExitUsage;
  }
  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDOUT_FILENO) && !(term != nullptr && std::string(term) == "dumb");
  // `COMMAND --help` only prints the usage: a token, TLS or config file it cannot read is no
  // error then; zpipe config reads its file itself.
  const bool help = WantsHelp(args);
  if (help || command == "config") {
    CliContext ctx(kDefaultCoordinator, output, std::cout, std::cerr, terminal);
    return spec->run(ctx, args);
  }
  const std::string config_path = ConfigPath(ProcessEnv());
  absl::StatusOr<CliConfig> config = LoadCliConfig(config_path);
  if (!config.ok()) {
    std::cerr << "zpipe: " << config.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<Connection> connection =
      ResolveConnection({.context = globals.context,
                         .coordinator = globals.coordinator,
                         .token_file = globals.token_file,
                         .tls_ca = globals.tls_ca,
                         .tls_cert = globals.tls_cert,
                         .tls_key = globals.tls_key},
                        ProcessEnv(), *config, config_path);
  if (!connection.ok()) {
    std::cerr << "zpipe: " << connection.status().message() << "\n";
    return kExitUsage;
  }
  CliContext ctx(connection->coordinator.value, output, std::cout, std::cerr, terminal);
  if (!connection->token.value.empty()) {
    ctx.SetToken(connection->token.value, connection->token.source);
  } else if (!connection->token_file.value.empty()) {
    const std::string& file = connection->token_file.value;
    std::optional<std::string> token = ReadTokenFile(file);
    if (!token.has_value() || token->empty()) {
      std::cerr << "zpipe: " << connection->token_file.source << ": "
                << (token.has_value() ? "no token in " : "cannot read ") << file << "\n";
      return kExitUsage;
    }
    ctx.SetToken(*token, connection->token_file.source + " " + file);
  }
  // A file nobody set is named by its flag, so "--tls-cert F needs --tls-key too" says what to add.
  auto named = [](const Setting& s, const char* flag) {
    return zpipe::util::NamedFile{s.value.empty() ? std::string(flag) : s.source, s.value};
  };
  const zpipe::util::NamedFile ca = named(connection->tls_ca, "--tls-ca");
  auto tls = zpipe::util::LoadTlsClientPem(ca, named(connection->tls_cert, "--tls-cert"),
                                           named(connection->tls_key, "--tls-key"));
  if (!tls.ok()) {
    std::cerr << "zpipe: " << tls.status().message() << "\n";
    return kExitUsage;
  }
  const bool has_tls = tls->has_value();
  ctx.SetTls(*std::move(tls), ca.path.empty() ? "" : ca.source + " " + ca.path);
  const char* require_env = std::getenv("ZPIPE_REQUIRE_TLS");
  const bool require_tls =
      globals.require_tls || (require_env != nullptr && std::string(require_env) == "1");
  if (std::string problem = zpipe::util::PlaintextTokenProblem(
          "zpipe", connection->coordinator.value, ctx.has_token(), has_tls, require_tls,
          "--tls-ca");
      !problem.empty()) {
    std::cerr << problem << "\n";
    if (require_tls) return kExitUsage;
  }
  zpipe::SilenceGrpcLogging();  // Fail() prints each error in one line
  return spec->run(ctx, args);
}
