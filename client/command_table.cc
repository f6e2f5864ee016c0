#include "client/command_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/plan_command.h"

namespace zpipe::cli {
namespace {

constexpr absl::string_view kStates = "pending scheduling running succeeded failed cancelled";

FlagSpec Switch(absl::string_view name, absl::string_view help, absl::string_view more = "") {
  return {.name = name, .value = ValueKind::kNone, .help = help, .more = more};
}
FlagSpec Value(absl::string_view name, ValueKind kind, absl::string_view value_name,
               absl::string_view help, absl::string_view more = "") {
  return {.name = name, .value = kind, .help = help, .value_name = value_name, .more = more};
}

// --limit and --continue of a listing that pages. FlagSpec holds views: `help` must be a literal.
FlagSpec Limit(absl::string_view help) {
  return Value("--limit", ValueKind::kText, "N", help,
               ": then, when there are more, how to ask for the next ones (on stderr; -o json: "
               "next_page_token)");
}
FlagSpec Continue() {
  return Value("--continue", ValueKind::kText, "TOKEN", "the page after the one that gave TOKEN",
               "(with --limit)");
}

FlagSpec OutFile() {
  return {
      .name = "--file", .short_name = "-f", .value = ValueKind::kFile, .help = "the file to write"};
}
FlagSpec JobFile() {
  return {.name = "--file",
          .short_name = "-f",
          .value = ValueKind::kJobFile,
          .help = "the job file",
          .more = "(instead of the positional FILE)"};
}

CommandSpec Submit() {
  return {.name = "submit",
          .synopsis = "submit FILE [--id ID] [--label KEY=VALUE ...] [--wait|--follow] [--dry-run] "
                      "[--upload] [--parse-only]",
          .summary = "submit a job file (YAML or JSON; or -f FILE)",
          .operand = ValueKind::kJobFile,
          .flags = {JobFile(),
                    Value("--id", ValueKind::kText, "ID", "job id (idempotent submit)",
                          "; default: the coordinator picks one"),
                    Value("--label", ValueKind::kText, "KEY=VALUE", "label the job (repeatable)",
                          "; added to the job file's labels:, replacing a key it has"),
                    Switch("--wait", "wait until the job ends",
                           "; exit 0 if it succeeded, 1 if it failed or was cancelled"),
                    Switch("--follow", "wait, showing live progress",
                           "(per-rank F/B/W bars on a terminal)"),
                    Switch("--dry-run", "validate and plan only",
                           "; print the predicted statistics, create nothing"),
                    Switch("--upload", "send the job's files to the coordinator",
                           ": its model and token files (model.torchscript.path or "
                           "model.python.file, data.path, eval.path; relative to the job file's "
                           "folder), which it hands to the workers: for workers that share no "
                           "folder with you"),
                    Switch("--parse-only", "print the spec the job file makes, send nothing",
                           "; the one job-file reader, which the Python client runs too")},
          .formats = "json yaml name",
          .description =
              "submits a job file (FILE.yaml or FILE.json); -o name prints only the "
              "job id"};
}

CommandSpec Logs() {
  FlagSpec dash_f = Switch("-f", "");
  dash_f.deprecated_for = "--follow (-f means --file on every command)";
  return {
      .name = "logs",
      .synopsis = "logs ID [--rank R] [--follow] [--tail N] [--since WHEN]",
      .summary = "print the log lines of a job's workers",
      .operand = ValueKind::kJobId,
      .flags = {Value("--rank", ValueKind::kText, "R", "only this global rank"),
                Switch("--follow", "keep printing until the job ends",
                       "(-f, which means --file on every other command, still works here "
                       "this release, with a warning)"),
                Value("--tail", ValueKind::kText, "N", "only the last N lines",
                      "the coordinator holds"),
                Value("--since", ValueKind::kText, "WHEN", "only lines since a time or duration",
                      ": a duration back from now (10m, 1h30m) or an RFC 3339 time "
                      "(2026-01-02T15:04:05Z)"),
                dash_f},
      .formats = "json yaml",
      .description =
          "the log lines the job's workers wrote while they ran it (their failures "
          "included), each\nas TIME rank R: TEXT (worker clock, UTC; R = data_rank "
          "* p + pipeline_rank)",
      .notes =
          "-o json prints one JSON object per line: time, text, pipeline_rank, data_rank, "
          "rank,\nsequence (-o yaml: one YAML document per log line).\n"
          "The coordinator keeps the newest lines of each rank (zpipe-coordinator "
          "--log-lines) in\nmemory: after it restarts it has the lines workers sent "
          "since."};
}

CommandSpec JobsPlan() {
  std::vector<FlagSpec> flags = {
      Value("--job", ValueKind::kJobId, "ID", "the job whose plan to show"),
      Value("--rank", ValueKind::kText, "R", "only this rank")};
  const std::vector<FlagSpec>& local = LocalPlanFlags();
  flags.insert(flags.end(), local.begin(), local.end());
  // Two commands under one name: with --job the coordinator's plan of a job (job_plan_command,
  // which takes only --job and --rank), else a schedule planned here (plan_command, the rest).
  return {.name = "plan",
          .synopsis = "plan --job ID | plan --schedule S -p P -m M ...",
          .summary = "show a job's plan, or plan a schedule locally",
          .flags = std::move(flags),
          .formats = "json yaml"};
}

CommandSpec Run() {
  return {.name = "run",
          .synopsis = "run FILE --local [--workers N] [--out DIR] [--threads T] [--keep-logs]",
          .summary = "run a job on a local coordinator and workers",
          .operand = ValueKind::kJobFile,
          .flags = {JobFile(),
                    Switch("--local", "on this machine (required)",
                           ": start a coordinator and the workers here (the only mode so far)"),
                    Value("--workers", ValueKind::kText, "N", "local workers",
                          "to start (default p * d of the job)"),
                    Value("--out", ValueKind::kDir, "DIR", "where the report goes",
                          ": the timeline files (default: beside the job file)"),
                    Value("--threads", ValueKind::kText, "T", "threads per worker",
                          "(LibTorch intra-op; default 1)"),
                    Switch("--keep-logs", "keep the workers' logs",
                           ": the temporary directory with the coordinator's and workers' logs"),
                    Value("--metrics-listen", ValueKind::kText, "HOST:PORT", "metrics address",
                          ": let the coordinator serve Prometheus /metrics there (default off)")},
          .formats = "json yaml",
          .description =
              "a whole ZeroPipe on this machine for one job: a coordinator and the "
              "workers, the job\nfollowed live, then a summary and the timeline files",
          .notes =
              "-o json|yaml prints the final summary as JSON or YAML on stdout (the live "
              "view goes to stderr).\nexit codes: 0 succeeded; 1 failed or cancelled "
              "(Ctrl-C); 2 usage; 3 the local cluster did not start"};
}

CommandSpec Config() {
  return {.name = "config",
          .synopsis = "config get-contexts|use-context|set-context|current-context",
          .summary = "named coordinators and credentials (contexts)",
          .operand = ValueKind::kChoice,
          .operand_choices = "get-contexts use-context set-context current-context",
          .flags = {Value("--coordinator", ValueKind::kText, "ADDR", "coordinator address"),
                    Value("--token-file", ValueKind::kFile, "FILE", "token file"),
                    Value("--tls-ca", ValueKind::kFile, "FILE", "PEM CA"),
                    Value("--tls-cert", ValueKind::kFile, "FILE", "PEM client certificate"),
                    Value("--tls-key", ValueKind::kFile, "FILE", "PEM client key")},
          .formats = "json yaml name",
          .description =
              "zpipe config get-contexts          list the contexts (* = the current one)\n"
              "zpipe config current-context       print the current context's name\n"
              "zpipe config use-context NAME      make NAME the current context\n"
              "zpipe config set-context NAME [--coordinator ADDR] [--token-file FILE]\n"
              "                         [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
              "                                   make or change context NAME (\"\" clears a "
              "key)",
          .notes =
              "The file is $XDG_CONFIG_HOME/zeropipe/config.yaml (default "
              "~/.config/zeropipe/).\nzpipe --context NAME uses NAME for one command "
              "($ZPIPE_CONTEXT too). Flags beat the\nZPIPE_* environment, which beats the "
              "context, which beats the defaults."};
}

CommandSpec Trace() {
  return {
      .name = "trace",
      .synopsis = "trace ID [--iteration N] [--format chrome|svg] [--predicted] -f FILE",
      .summary = "write a job's executed timeline (Chrome trace or SVG)",
      .operand = ValueKind::kJobId,
      .flags = {Value("--iteration", ValueKind::kText, "N", "which iteration",
                      "(default: the latest complete one)"),
                {.name = "--format",
                 .value = ValueKind::kChoice,
                 .choices = "chrome svg",
                 .help = "trace format",
                 .more = ": chrome = Trace Event JSON (open in ui.perfetto.dev), svg = picture; "
                         "default: the file's extension (.svg), else chrome"},
                Switch("--predicted", "the plan's timeline (svg)", "instead of the executed one"),
                {.name = "--file",
                 .short_name = "-f",
                 .value = ValueKind::kFile,
                 .help = "the file to write",
                 .more = "(- writes to stdout)"}},
      .description =
          "the executed timeline of one iteration on all ranks, aligned to the "
          "coordinator's clock"};
}

CommandSpec Export() {
  return {
      .name = "export",
      .synopsis = "export ID -f FILE [--checkpoint-dir DIR]",
      .summary = "write a job's trained model from its latest checkpoint",
      .operand = ValueKind::kJobId,
      .flags = {OutFile(), Value("--checkpoint-dir", ValueKind::kDir, "DIR",
                                 "where the job's checkpoints are mounted here",
                                 "(default: the job's checkpoint.dir)")},
      .formats = "json yaml",
      .description =
          "writes the trained model of the job from its latest complete checkpoint: a "
          "TorchScript\nmodule with the trained weights (torchscript models; torch.jit.load) or "
          "a state dict\n(Python models and the built-in GPT; torch.load). Reads the job's "
          "checkpoint.dir/NAME, or DIR/NAME with\n--checkpoint-dir. Needs zpipe-worker beside "
          "zpipe or on PATH "
          "($ZPIPE_WORKER_BIN overrides);\n-o json|yaml prints what was written as a document."};
}

CommandSpec Completion() {
  return {.name = "completion",
          .synopsis = "completion bash|zsh|fish",
          .summary = "print a shell completion script",
          .operand = ValueKind::kChoice,
          .operand_choices = "bash zsh fish",
          .description =
              "prints a completion script for that shell. Load it in this shell with\n"
              "  bash: source <(zpipe completion bash)\n"
              "  zsh:  source <(zpipe completion zsh)     (after compinit)\n"
              "  fish: zpipe completion fish | source\n"
              "or for every shell: zpipe completion bash > "
              "~/.local/share/bash-completion/completions/zpipe,\n"
              "zpipe completion zsh > ~/.zfunc/_zpipe (a folder in $fpath), zpipe "
              "completion fish >\n~/.config/fish/completions/zpipe.fish."};
}

std::vector<CommandSpec> MakeCommands() {
  std::vector<CommandSpec> c;
  c.push_back(Submit());
  c.push_back({.name = "status",
               .synopsis = "status ID",
               .summary = "show a job",
               .operand = ValueKind::kJobId,
               .formats = "json yaml name"});
  c.push_back({.name = "list",
               .synopsis = "list [--state S,...] [-l KEY=VALUE ...] [--since DURATION] "
                           "[--limit N [--continue TOKEN]]",
               .summary = "list jobs, oldest first",
               .flags = {{.name = "--state",
                          .value = ValueKind::kChoice,
                          .choices = kStates,
                          .help = "only jobs in these states",
                          .value_name = "STATE[,STATE...]",
                          .more = ": pending, scheduling, running, succeeded, failed, cancelled"},
                         {.name = "--label",
                          .short_name = "-l",
                          .value = ValueKind::kText,
                          .help = "only jobs with this label (repeatable: all of them)",
                          .value_name = "KEY=VALUE"},
                         Value("--since", ValueKind::kText, "DURATION",
                               "only jobs submitted in the last DURATION (e.g. 1h, 7d)"),
                         Limit("at most N jobs (1 to 1000)"), Continue()},
               .formats = "wide json yaml name",
               .notes = "-o wide adds when each job started and ended, why it ended and its "
                        "labels; -o name prints only ids"});
  c.push_back({.name = "cancel",
               .synopsis = "cancel ID [--reason TEXT]",
               .summary = "cancel a job",
               .operand = ValueKind::kJobId,
               .flags = {Value("--reason", ValueKind::kText, "TEXT", "why, recorded with the job")},
               .formats = "json yaml name"});
  c.push_back({.name = "delete",
               .synopsis = "delete ID [ID...] [--force]",
               .summary = "delete finished jobs with their history, trace and logs",
               .operand = ValueKind::kJobId,
               .flags = {Switch("--force", "cancel a job that has not finished, then delete it")},
               .formats = "name",
               .description = "deletes each job: its record, event history, trace, logs and its "
                              "claim on uploaded\nartifacts; a job that has not finished needs "
                              "--force; exit 1 if any job could not be deleted"});
  c.push_back({.name = "watch",
               .synopsis = "watch ID",
               .summary = "follow a job until it ends",
               .operand = ValueKind::kJobId,
               .formats = "json yaml",
               .description = "live per-rank F/B/W bars on a terminal, one line per state change "
                              "and iteration otherwise;\nwith -o json one JSON event per line "
                              "(-o yaml: one YAML document per event); exit 0 if the job\n"
                              "succeeded, 1 if it failed or was cancelled"});
  c.push_back(Logs());
  c.push_back({.name = "workers",
               .synopsis = "workers [--all] [-o wide] [--limit N [--continue TOKEN]]",
               .summary = "list registered workers",
               .flags = {Switch("--all", "include dead workers", "(lost recently)"),
                         Switch("--wide", "more columns (as -o wide)",
                                ": the host, the full GPU name, the CUDA runtime and the last "
                                "heartbeat"),
                         Limit("at most N workers (1 to 1000)"), Continue()},
               .formats = "wide json yaml name",
               .notes = "-o name prints only the worker names"});
  c.push_back(JobsPlan());
  c.push_back(Trace());
  c.push_back(Run());
  c.push_back(Export());
  c.push_back({.name = "version",
               .synopsis = "version [--client]",
               .summary = "this zpipe's version and build, and the coordinator's",
               .flags = {Switch("--client", "only this zpipe's; ask no coordinator")},
               .formats = "json yaml",
               .description = "this zpipe's version, git commit and the LibTorch (and CUDA) it "
                              "was built with, then the\ncoordinator's (exit 3 when it cannot be "
                              "reached). zpipe --version prints the first line alone."});
  c.push_back(Config());
  c.push_back(Completion());
  return c;
}

// `zpipe --help`'s "commands:" section: each synopsis with its summary beside it.
std::string CommandList() {
  std::string list = "commands:\n";
  for (const CommandSpec& c : Commands()) {
    if (c.synopsis.size() > 40) {
      absl::StrAppendFormat(&list, "  %s\n  %-40s  %s\n", c.synopsis, "", c.summary);
    } else {
      absl::StrAppendFormat(&list, "  %-40s  %s\n", c.synopsis, c.summary);
    }
  }
  return list;
}

constexpr char kExitCodes[] =
    "exit codes: 0 success; 1 job failed or cancelled, or the operation was refused (also a\n"
    "            missing or refused token);\n"
    "            2 usage error or invalid job spec; 3 coordinator unreachable;\n"
    "            4 the coordinator refused for lack of resources (its job store is full,\n"
    "            or --max-pending-jobs reached): retry later\n";

}  // namespace

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec>* const kCommands =
      new std::vector<CommandSpec>(MakeCommands());
  return *kCommands;
}

const std::vector<FlagSpec>& GlobalFlags() {
  static const std::vector<FlagSpec>* const kGlobals = new std::vector<FlagSpec>{
      Value("--context", ValueKind::kContext, "NAME", "a context of the config file",
            "$XDG_CONFIG_HOME/zeropipe/config.yaml (default: its current-context; see zpipe "
            "config --help)"),
      Value("--coordinator", ValueKind::kText, "ADDR", "coordinator address (host:port)",
            "(default localhost:50051)"),
      Value("--token-file", ValueKind::kFile, "FILE", "file holding the client token",
            "(or admin token) a coordinator with token files requires: the first line of FILE "
            "that is not blank or #"),
      Value("--tls-ca", ValueKind::kFile, "FILE", "PEM CA: talk TLS to the coordinator",
            ", verifying it with this CA (without one, plaintext)"),
      Value("--tls-cert", ValueKind::kFile, "FILE", "PEM client certificate",
            "(with --tls-key) for a coordinator that requires one (--tls-client-ca)"),
      Value("--tls-key", ValueKind::kFile, "FILE", "PEM client key", "of --tls-cert"),
      {.name = "--output",
       .short_name = "-o",
       .value = ValueKind::kChoice,
       .choices = "text wide json yaml name",
       .help = "output format",
       .value_name = "FORMAT",
       .more = ": text (default), wide, json, yaml or name (ids only), as the command offers; "
               "files are always -f/--file FILE or a positional"},
      Switch("--require-tls", "refuse to send a token without TLS to another machine",
             "(also ZPIPE_REQUIRE_TLS=1); without it, zpipe warns and sends it"),
      Switch("--version", "print the version", "of this zpipe"),
      {.name = "--help", .short_name = "-h", .help = "print the usage"}};
  return *kGlobals;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Args ArgsFor(const CommandSpec& command) { return Args(command); }

Args ArgsFor(absl::string_view command) {
  const CommandSpec* spec = FindCommand(command);
  return spec == nullptr ? Args() : Args(*spec);
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
  std::vector<FlagSpec> globals;
  for (const FlagSpec& f : GlobalFlags()) {
    if (f.name != "--help") globals.push_back(f);
  }
  return absl::StrCat(
      "usage: zpipe [--context NAME] [--coordinator ADDR] [-o FORMAT] COMMAND [ARGS...]\n\n",
      CommandList(), "\nzpipe COMMAND --help prints that command's usage.\n",
      FlagsHelp(globals, "global options (before or after COMMAND)"),
      "  Each setting comes from, first match wins: the flag, $ZPIPE_COORDINATOR, $ZPIPE_TOKEN\n"
      "  (the token itself), $ZPIPE_TLS_CA, $ZPIPE_TLS_CERT, $ZPIPE_TLS_KEY, the context\n"
      "  (--context, else $ZPIPE_CONTEXT, else the file's current-context), the default.\n\n",
      kExitCodes);
}

}  // namespace zpipe::cli
