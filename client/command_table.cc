#include "client/command_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/trace_command.h"

namespace zpipe::cli {
namespace {

constexpr absl::string_view kSchedules =
    "gpipe 1f1b interleaved zb-h1 zb-h2 zb-1p zb-2p zb-auto zb-v v-half v-min dualpipe-v all";
constexpr absl::string_view kStates = "pending scheduling running succeeded failed cancelled";

FlagSpec Switch(absl::string_view name, absl::string_view help) {
  return {.name = name, .value = ValueKind::kNone, .help = help};
}
FlagSpec Value(absl::string_view name, ValueKind kind, absl::string_view help,
               absl::string_view short_name = "") {
  return {.name = name, .short_name = short_name, .value = kind, .help = help};
}
FlagSpec Choice(absl::string_view name, absl::string_view choices, absl::string_view help) {
  return {.name = name, .value = ValueKind::kChoice, .choices = choices, .help = help};
}

std::vector<CommandSpec> MakeCommands() {
  const FlagSpec out_file = Value("--file", ValueKind::kFile, "the file to write", "-f");
  const FlagSpec job_file = Value("--file", ValueKind::kJobFile, "the job file", "-f");
  std::vector<CommandSpec> c;
  c.push_back({.name = "submit",
               .synopsis = "submit FILE [--id ID] [--wait|--follow]",
               .summary = "submit a job file (YAML or JSON; or -f FILE)",
               .operand = ValueKind::kJobFile,
               .flags = {job_file, Value("--id", ValueKind::kText, "job id (idempotent submit)"),
                         Switch("--wait", "wait until the job ends"),
                         Switch("--follow", "wait, showing live progress"),
                         Switch("--dry-run", "validate and plan only"),
                         Switch("--upload", "send the job's files to the coordinator"),
                         Switch("--parse-only", "print the spec the job file makes, send nothing")},
               .formats = "json yaml name",
               .run = RunSubmitCommand});
  c.push_back({.name = "status",
               .synopsis = "status ID",
               .summary = "show a job",
               .operand = ValueKind::kJobId,
               .formats = "json yaml name",
               .run = RunStatusCommand});
  c.push_back({.name = "list",
               .synopsis = "list [--state S,...]",
               .summary = "list jobs, oldest first",
               .flags = {Choice("--state", kStates, "only jobs in these states")},
               .formats = "wide json yaml name",
               .run = RunListCommand});
  c.push_back({.name = "cancel",
               .synopsis = "cancel ID",
               .summary = "cancel a job",
               .operand = ValueKind::kJobId,
               .flags = {Value("--reason", ValueKind::kText, "why, recorded with the job")},
               .formats = "json yaml name",
               .run = RunCancelCommand});
  c.push_back({.name = "watch",
               .synopsis = "watch ID",
               .summary = "follow a job until it ends",
               .operand = ValueKind::kJobId,
               .formats = "json yaml",
               .run = RunWatchCommand});
  FlagSpec logs_f = Switch("-f", "");
  logs_f.deprecated_for = "--follow (-f means --file on every command)";
  c.push_back({.name = "logs",
               .synopsis = "logs ID [--rank R] [--follow] [--tail N]",
               .summary = "print the log lines of a job's workers",
               .operand = ValueKind::kJobId,
               .flags = {Value("--rank", ValueKind::kText, "only this global rank"),
                         Switch("--follow", "keep printing until the job ends"),
                         Value("--tail", ValueKind::kText, "only the last N lines"),
                         Value("--since", ValueKind::kText, "only lines since a time or duration"),
                         logs_f},
               .formats = "json yaml",
               .run = RunLogsCommand});
  c.push_back({.name = "workers",
               .synopsis = "workers [--all] [-o wide]",
               .summary = "list registered workers",
               .flags = {Switch("--all", "include dead workers"),
                         Switch("--wide", "more columns (as -o wide)")},
               .formats = "wide json yaml name",
               .run = RunWorkersCommand});
  // Two commands under one name: with --job the coordinator's plan of a job (job_plan_command,
  // which takes only --job and --rank), else a schedule planned here (plan_command, the rest).
  c.push_back(
      {.name = "plan",
       .synopsis = "plan --job ID | plan --schedule S -p P -m M ...",
       .summary = "show a job's plan, or plan a schedule locally",
       .flags = {Value("--job", ValueKind::kJobId, "the job whose plan to show"),
                 Value("--rank", ValueKind::kText, "only this rank"),
                 Choice("--schedule", kSchedules, "the schedule to plan"),
                 Value("--pipeline", ValueKind::kText, "pipeline stages", "-p"),
                 Value("--microbatches", ValueKind::kText, "microbatches", "-m"),
                 Value("--chunks", ValueKind::kText, "chunks per rank"),
                 Value("--cost", ValueKind::kText, "f=,b=,w=,comm= per stage"),
                 Value("--memory", ValueKind::kText, "f=,b=,w= per stage"),
                 Value("--memory-limit", ValueKind::kText, "activation memory limit"),
                 Switch("--lower", "lower to send/recv"),
                 Value("--buckets", ValueKind::kText, "gradient buckets per stage"),
                 Value("--reduce-cost", ValueKind::kText, "cost of one bucket's reduce"),
                 Value("--budget", ValueKind::kText, "search seconds per schedule"),
                 Value("--seed", ValueKind::kText, "search seed"),
                 Choice("--format", "summary text json csv ascii svg torch-csv", "what to print"),
                 Value("--width", ValueKind::kText, "ascii width"), out_file},
       .formats = "json yaml",
       .run = RunJobPlanCommand});
  c.push_back({.name = "trace",
               .synopsis = "trace ID [--iteration N] [--format chrome|svg] -f FILE",
               .summary = "write a job's executed timeline (Chrome trace or SVG)",
               .operand = ValueKind::kJobId,
               .flags = {Value("--iteration", ValueKind::kText, "which iteration"),
                         Choice("--format", "chrome svg", "trace format"),
                         Switch("--predicted", "the plan's timeline (svg)"), out_file},
               .run = RunTraceCommand});
  c.push_back({.name = "run",
               .synopsis = "run FILE --local [--workers N] [--out DIR]",
               .summary = "run a job on a local coordinator and workers",
               .operand = ValueKind::kJobFile,
               .flags = {job_file, Switch("--local", "on this machine (required)"),
                         Value("--workers", ValueKind::kText, "local workers"),
                         Value("--out", ValueKind::kDir, "where the report goes"),
                         Value("--threads", ValueKind::kText, "threads per worker"),
                         Switch("--keep-logs", "keep the workers' logs"),
                         Value("--metrics-listen", ValueKind::kText, "metrics address")},
               .formats = "json yaml",
               .run = RunRunCommand});
  c.push_back({.name = "export",
               .synopsis = "export ID -f FILE",
               .summary = "write a job's trained model from its latest checkpoint",
               .operand = ValueKind::kJobId,
               .flags = {out_file, Value("--checkpoint-dir", ValueKind::kDir,
                                         "where the job's checkpoints are mounted here")},
               .formats = "json yaml",
               .run = RunExportCommand});
  c.push_back({.name = "version",
               .synopsis = "version [--client]",
               .summary = "this zpipe's version and build, and the coordinator's",
               .flags = {Switch("--client", "only this zpipe's; ask no coordinator")},
               .formats = "json yaml",
               .run = RunVersionCommand});
  c.push_back({.name = "config",
               .synopsis = "config get-contexts|use-context|set-context|current-context",
               .summary = "named coordinators and credentials (contexts)",
               .operand = ValueKind::kChoice,
               .operand_choices = "get-contexts use-context set-context current-context",
               .flags = {Value("--coordinator", ValueKind::kText, "coordinator address"),
                         Value("--token-file", ValueKind::kFile, "token file"),
                         Value("--tls-ca", ValueKind::kFile, "PEM CA"),
                         Value("--tls-cert", ValueKind::kFile, "PEM client certificate"),
                         Value("--tls-key", ValueKind::kFile, "PEM client key")},
               .formats = "json yaml name",
               .run = RunConfigCommand});
  c.push_back({.name = "completion",
               .synopsis = "completion bash|zsh|fish",
               .summary = "print a shell completion script",
               .operand = ValueKind::kChoice,
               .operand_choices = "bash zsh fish"});
  return c;
}

// Optimal string alignment distance: edits, with a swap of neighbours counting one.
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec>* const kCommands =
      new std::vector<CommandSpec>(MakeCommands());
  return *kCommands;
}

const std::vector<FlagSpec>& GlobalFlags() {
  static const std::vector<FlagSpec>* const kGlobals = new std::vector<FlagSpec>{
      Value("--coordinator", ValueKind::kText, "coordinator address (host:port)"),
      Value("--context", ValueKind::kContext, "a context of the config file"),
      Value("--token-file", ValueKind::kFile, "file holding the client token"),
      Value("--tls-ca", ValueKind::kFile, "PEM CA: talk TLS to the coordinator"),
      Value("--tls-cert", ValueKind::kFile, "PEM client certificate"),
      Value("--tls-key", ValueKind::kFile, "PEM client key"),
      {.name = "--output",
       .short_name = "-o",
       .value = ValueKind::kChoice,
       .choices = "text wide json yaml name",
       .help = "output format"},
      Switch("--require-tls", "refuse to send a token without TLS to another machine"),
      Switch("--version", "print the version"),
      Switch("--help", "print the usage")};
  return *kGlobals;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Args ArgsFor(const CommandSpec& command) {
  Args args;
  for (const FlagSpec& f : command.flags) {
    if (!f.deprecated_for.empty()) continue;  // added below, as an alias of its replacement
    const std::string name(f.name);
    if (f.value == ValueKind::kNone) {
      args.Switch(name);
    } else {
      args.Flag(name);
    }
    if (!f.short_name.empty()) args.Alias(std::string(f.short_name), name);
  }
  for (const FlagSpec& f : command.flags) {
    if (f.deprecated_for.empty()) continue;
    const std::string replacement(f.deprecated_for);
    args.Alias(std::string(f.name), replacement.substr(0, replacement.find(' ')), replacement);
  }
  return args;
}

Args ArgsFor(absl::string_view command) {
  const CommandSpec* spec = FindCommand(command);
  return spec == nullptr ? Args() : ArgsFor(*spec);
}

std::optional<std::string> Suggest(absl::string_view typo,
                                   const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const size_t d = Distance(typo, c);
    if (d < best_distance && 2 * d < typo.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::optional<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "text" || name == "table") return OutputFormat::kTable;
  if (name == "wide") return OutputFormat::kWide;
  if (name == "json") return OutputFormat::kJson;
  if (name == "yaml") return OutputFormat::kYaml;
  if (name == "name") return OutputFormat::kName;
  return std::nullopt;
}

absl::string_view OutputFormatName(OutputFormat format) {
  switch (format) {
    case OutputFormat::kTable:
      return "text";
    case OutputFormat::kWide:
      return "wide";
    case OutputFormat::kJson:
      return "json";
    case OutputFormat::kYaml:
      return "yaml";
    case OutputFormat::kName:
      return "name";
  }
  return "text";
}

bool CommandPrints(const CommandSpec& command, OutputFormat format) {
  if (format == OutputFormat::kTable) return true;
  const std::string name(OutputFormatName(format));
  const std::string formats = absl::StrCat(" ", command.formats, " ");
  return formats.find(" " + name + " ") != std::string::npos;
}

std::string TopUsage() {
  std::string usage =
      "usage: zpipe [--context NAME] [--coordinator ADDR] [-o FORMAT] COMMAND [ARGS...]\n"
      "\ncommands:\n";
  for (const CommandSpec& c : Commands()) {
    if (c.synopsis.size() > 40) {
      absl::StrAppendFormat(&usage, "  %s\n  %-40s  %s\n", c.synopsis, "", c.summary);
    } else {
      absl::StrAppendFormat(&usage, "  %-40s  %s\n", c.synopsis, c.summary);
    }
  }
  absl::StrAppend(
      &usage,
      "\nzpipe COMMAND --help prints that command's usage.\n"
      "\nglobal options (before or after COMMAND):\n"
      "  --context NAME      a context of $XDG_CONFIG_HOME/zeropipe/config.yaml (default: its\n"
      "                      current-context; see zpipe config --help)\n"
      "  --coordinator ADDR  coordinator address (default localhost:50051)\n"
      "  --token-file FILE   the client (or admin) token a coordinator with token files requires:\n"
      "                      the first line of FILE that is not blank or #\n"
      "  --tls-ca FILE       talk TLS to the coordinator, verifying it with this PEM CA (without\n"
      "                      one, plaintext)\n"
      "  --tls-cert FILE     with --tls-key: this PEM client certificate, for a coordinator that\n"
      "  --tls-key FILE      requires one (--tls-client-ca)\n"
      "  -o, --output FORMAT text (default), wide, json, yaml or name (ids only), as the command\n"
      "                      offers; files are always -f/--file FILE or a positional\n"
      "  --require-tls       refuse to send a token to another machine without TLS (also\n"
      "                      ZPIPE_REQUIRE_TLS=1); without it, zpipe warns and sends it\n"
      "  --version           print this zpipe's version\n"
      "  Each setting comes from, first match wins: the flag, $ZPIPE_COORDINATOR, $ZPIPE_TOKEN\n"
      "  (the token itself), $ZPIPE_TLS_CA, $ZPIPE_TLS_CERT, $ZPIPE_TLS_KEY, the context\n"
      "  (--context, else $ZPIPE_CONTEXT, else the file's current-context), the default.\n");
  return usage;
}

}  // namespace zpipe::cli
