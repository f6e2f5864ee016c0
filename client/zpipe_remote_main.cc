// zpipe-remote: the `zpipe` commands that talk to a coordinator (and `config`, `version`). Users
// run `zpipe`, which answers the local commands itself and execs this binary, beside it, with the
// same arguments for the rest (dispatch.h). This file resolves the global options (flags,
// environment, config file, token, TLS) and runs the command from cli.h's CommandRunner().
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/cli_config.h"
#include "client/command_table.h"
#include "client/dispatch.h"
#include "flags/values.h"

namespace zpipe::cli {
namespace {

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
  if (std::optional<int> exit = RunLocalCommand(argv, inv)) return *exit;
  const CommandRun run = CommandRunner(inv.command);
  if (run == nullptr) {  // a command the table has and neither binary runs: a bug, said so
    std::cerr << "zpipe: no runner for command '" << inv.command << "' (command_runners.cc)\n";
    return kExitUsage;
  }
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
    return run(ctx, inv.args);
  }
  std::optional<CliContext> ctx;
  if (std::optional<int> exit = Connect(inv.globals, output, terminal, ctx)) return *exit;
  SilenceGrpcLogging();  // Fail() prints each error in one line
  return run(*ctx, inv.args);
}

}  // namespace
}  // namespace zpipe::cli

int main(int argc, char** argv) {
  return zpipe::cli::Main(std::vector<std::string>(argv + 1, argv + argc));
}
