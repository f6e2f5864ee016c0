#include "client/dispatch.h"

#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/cli_common.h"
#include "client/command_table.h"
#include "client/plan_command.h"

namespace zpipe::cli {
namespace {

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

}  // namespace

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

std::optional<int> RunLocalCommand(const std::vector<std::string>& argv, Invocation& inv) {
  if (std::optional<int> exit = SplitCommandLine(argv, inv)) return *exit;
  if (inv.command == "completion") return RunCompletionCommand(inv.args, std::cout, std::cerr);
  if (inv.command == "plan" && !AsksForAJobsPlan(inv.args)) return RunLocalPlan(inv);
  return std::nullopt;
}

}  // namespace zpipe::cli
