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
#include "client/plan_command.h"
#include "client/trace_command.h"

namespace {

constexpr char kUsage[] =
    "usage: zpipe [--coordinator ADDR] [-o table|json] COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  submit FILE [--id ID] [--wait|--follow]   submit a job file (YAML or JSON)\n"
    "  status ID                                 show a job\n"
    "  list [--state S,...]                      list jobs, oldest first\n"
    "  cancel ID                                 cancel a job\n"
    "  watch ID                                  follow a job until it ends\n"
    "  logs ID [--rank R] [--follow] [--tail N]  print the log lines of a job's workers\n"
    "  workers [--all] [--wide]                  list registered workers\n"
    "  plan --job ID                             show the plan the coordinator made for a job\n"
    "  plan ...                                  generate a schedule locally and print the plan\n"
    "  trace ID [--iteration N] [--format chrome|svg] -o FILE\n"
    "                                            write a job's executed timeline (Chrome "
    "trace/SVG)\n"
    "  run FILE --local [--workers N] [--out DIR] run a job on a local coordinator and workers, "
    "then\n"
    "                                            summarize it and write its timeline\n"
    "  export ID -o FILE                         write a job's trained model (TorchScript or\n"
    "                                            state dict) from its latest checkpoint\n"
    "  completion bash                           print a bash completion script\n"
    "\n"
    "zpipe COMMAND --help prints that command's usage.\n"
    "\n"
    "global options (before or after COMMAND):\n"
    "  --coordinator ADDR  coordinator address (default $ZPIPE_COORDINATOR, else localhost:50051)\n"
    "  --token-file FILE   the client (or admin) token a coordinator with token files requires:\n"
    "                      the first line of FILE that is not blank or # (default $ZPIPE_TOKEN)\n"
    "  --tls-ca FILE       talk TLS to the coordinator, verifying it with this PEM CA (default\n"
    "                      $ZPIPE_TLS_CA; without either, plaintext)\n"
    "  --tls-cert FILE     with --tls-key: this PEM client certificate, for a coordinator that\n"
    "  --tls-key FILE      requires one (--tls-client-ca) (default $ZPIPE_TLS_CERT, "
    "$ZPIPE_TLS_KEY)\n"
    "  -o table|json       output format (default table)\n"
    "\n"
    "exit codes: 0 success; 1 job failed or cancelled, or the operation was refused (also a\n"
    "            missing or refused token);\n"
    "            2 usage error or invalid job spec; 3 coordinator unreachable\n";

struct GlobalOptions {
  std::optional<std::string> coordinator;
  std::optional<std::string> output;
  std::string output_flag;  // how `output` was given: "-o" or "--output"
  std::optional<std::string> token_file;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
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

// Removes --coordinator / -o / --output / --token-file / --tls-* (with their values) from `args`.
// Returns an error message, or "" when all is well.
std::string ExtractGlobals(std::vector<std::string>& args, GlobalOptions& globals,
                           bool leading_only) {
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
    if (name == "--coordinator") target = &globals.coordinator;
    if (name == "-o" || name == "--output") target = &globals.output;
    if (name == "--token-file") target = &globals.token_file;
    if (name == "--tls-ca") target = &globals.tls_ca;
    if (name == "--tls-cert") target = &globals.tls_cert;
    if (name == "--tls-key") target = &globals.tls_key;
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

}  // namespace

int main(int argc, char** argv) {
  using namespace zpipe::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  GlobalOptions globals;
  if (std::string error = ExtractGlobals(args, globals, /*leading_only=*/true); !error.empty()) {
    std::cerr << "zpipe: " << error << "\n" << kUsage;
    return kExitUsage;
  }
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command.size() > 1 && command[0] == '-') {
    std::cerr << "zpipe: unknown option '" << command << "'\n" << kUsage;
    return kExitUsage;
  }
  if (command == "completion") return RunCompletionCommand(args, std::cout, std::cerr);
  // The local `zpipe plan` parses its own flags (-o table|json, --output FILE, ...); a -o given
  // before the command means the same there as after it.
  if (command == "plan" && !HasJobFlag(args)) {
    if (globals.output.has_value()) {
      args.insert(args.begin(), {globals.output_flag, *globals.output});
    }
    return RunPlanCommand(args, std::cout, std::cerr);
  }

  // `zpipe trace` has its own -o FILE, like the local `zpipe plan`.
  if (command == "trace") {
    for (std::string& a : args) {
      if (a == "-o") a = kTraceFileFlag;
    }
  }
  if (command == "export") {
    for (std::string& a : args) {
      if (a == "-o") a = kExportFileFlag;
    }
  }
  if (std::string error = ExtractGlobals(args, globals, /*leading_only=*/false); !error.empty()) {
    std::cerr << "zpipe " << command << ": " << error << "\n";
    return kExitUsage;
  }
  OutputFormat output = OutputFormat::kTable;
  if (globals.output.has_value()) {
    if (*globals.output == "json") {
      output = OutputFormat::kJson;
    } else if (*globals.output != "table") {
      std::cerr << "zpipe: -o takes table or json, got '" << *globals.output << "'\n";
      return kExitUsage;
    }
  }
  std::string coordinator = kDefaultCoordinator;
  if (const char* env = std::getenv(kCoordinatorEnv); env != nullptr && *env != '\0')
    coordinator = env;
  if (globals.coordinator.has_value()) coordinator = *globals.coordinator;

  const char* term = std::getenv("TERM");
  const bool terminal = isatty(STDOUT_FILENO) && !(term != nullptr && std::string(term) == "dumb");
  CliContext ctx(coordinator, output, std::cout, std::cerr, terminal);
  // `COMMAND --help` only prints the usage: a token or TLS file it cannot read is no error then.
  const bool help = WantsHelp(args);
  if (!help && globals.token_file.has_value()) {
    std::optional<std::string> token = ReadTokenFile(*globals.token_file);
    if (!token.has_value() || token->empty()) {
      std::cerr << "zpipe: --token-file: " << (token.has_value() ? "no token in " : "cannot read ")
                << *globals.token_file << "\n";
      return kExitUsage;
    }
    ctx.SetToken(*token, "--token-file " + *globals.token_file);
  } else if (const char* env = std::getenv(kTokenEnv); !help && env != nullptr && *env != '\0') {
    ctx.SetToken(env, kTokenEnv);
  }
  // TLS files: a flag wins over its environment variable.
  auto named = [](const std::optional<std::string>& flag, const char* flag_name,
                  const char* env_name) {
    if (flag.has_value()) return zpipe::core::NamedFile{flag_name, *flag};
    const char* env = std::getenv(env_name);
    if (env == nullptr || *env == '\0') return zpipe::core::NamedFile{flag_name, ""};
    return zpipe::core::NamedFile{env_name, env};
  };
  const zpipe::core::NamedFile ca = named(globals.tls_ca, "--tls-ca", kTlsCaEnv);
  auto tls =
      help ? absl::StatusOr<std::optional<zpipe::core::TlsClientPem>>(std::nullopt)
           : zpipe::core::LoadTlsClientPem(ca, named(globals.tls_cert, "--tls-cert", kTlsCertEnv),
                                           named(globals.tls_key, "--tls-key", kTlsKeyEnv));
  if (!tls.ok()) {
    std::cerr << "zpipe: " << tls.status().message() << "\n";
    return kExitUsage;
  }
  ctx.SetTls(*std::move(tls), ca.path.empty() ? "" : ca.source + " " + ca.path);
  zpipe::SilenceGrpcLogging();  // Fail() prints each error in one line
  if (command == "submit") return RunSubmitCommand(ctx, args);
  if (command == "status") return RunStatusCommand(ctx, args);
  if (command == "list") return RunListCommand(ctx, args);
  if (command == "cancel") return RunCancelCommand(ctx, args);
  if (command == "watch") return RunWatchCommand(ctx, args);
  if (command == "workers") return RunWorkersCommand(ctx, args);
  if (command == "logs") return RunLogsCommand(ctx, args);
  if (command == "plan") return RunJobPlanCommand(ctx, args);
  if (command == "trace") return RunTraceCommand(ctx, args);
  if (command == "run") return RunRunCommand(ctx, args);
  if (command == "export") return RunExportCommand(ctx, args);
  std::cerr << "zpipe: unknown command '" << command << "'\n" << kUsage;
  return kExitUsage;
}
