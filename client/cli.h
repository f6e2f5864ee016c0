// Shared pieces of the `zpipe` subcommands that talk to a coordinator: global options, argument
// parsing, error reporting and output helpers. The exit codes and -o formats are cli_common.h's.
// `zpipe COMMAND --help` (or -h) prints that command's usage on stdout and exits 0.
#ifndef ZPIPE_CLIENT_CLI_H_
#define ZPIPE_CLIENT_CLI_H_

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli_common.h"
#include "client/client.h"
#include "client/command_spec.h"

namespace zpipe::cli {

inline constexpr char kDefaultCoordinator[] = "localhost:50051";
inline constexpr char kCoordinatorEnv[] = "ZPIPE_COORDINATOR";
inline constexpr char kTokenEnv[] = "ZPIPE_TOKEN";
inline constexpr char kTlsCaEnv[] = "ZPIPE_TLS_CA";
inline constexpr char kTlsCertEnv[] = "ZPIPE_TLS_CERT";
inline constexpr char kTlsKeyEnv[] = "ZPIPE_TLS_KEY";

// What every coordinator subcommand gets: the resolved global options, its streams, and a client
// made on first use.
class CliContext {
 public:
  CliContext(std::string coordinator, OutputFormat output, std::ostream& out, std::ostream& err,
             bool out_is_terminal);
  // Uses `client` instead of connecting to `coordinator` (tests: a FakeClient).
  CliContext(std::unique_ptr<Client> client, std::string coordinator, OutputFormat output,
             std::ostream& out, std::ostream& err, bool out_is_terminal);

  const std::string& coordinator() const { return coordinator_; }
  // The token for the client made by client(), and where it came from ("ZPIPE_TOKEN",
  // "--token-file FILE") for error messages. Call before the first client().
  void SetToken(std::string token, std::string source);
  bool has_token() const { return !token_.empty(); }
  // TLS for the client made by client() (nullopt = plaintext), and where the CA came from
  // ("--tls-ca FILE", "ZPIPE_TLS_CA=FILE", "" for the system's roots) for error messages. Call
  // before the first client().
  void SetTls(std::optional<util::TlsClientPem> tls, std::string ca_source);
  OutputFormat output() const { return output_; }
  // A document format (-o json or -o yaml): print with PrintDocument (json_output.h).
  bool json() const { return output_ == OutputFormat::kJson || output_ == OutputFormat::kYaml; }
  bool wide() const { return output_ == OutputFormat::kWide; }
  bool names() const { return output_ == OutputFormat::kName; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }
  bool out_is_terminal() const { return out_is_terminal_; }
  Client& client();

  // Prints "zpipe COMMAND: <what went wrong>" (with a hint for an unreachable coordinator, a
  // missing or refused token, a failed TLS handshake) and returns the exit code for `status`
  // (kExitJobFailed for a TLS handshake that failed: the coordinator is there but not trusted).
  // The status message is shown through util::SanitizeForTerminal.
  int Fail(const std::string& command, const absl::Status& status);
  // Prints "zpipe COMMAND: message", the command's usage line (command table) and where its
  // --help is; returns kExitUsage.
  int Usage(const std::string& command, absl::string_view message);

 private:
  std::string coordinator_;
  std::string token_;
  std::string token_source_;
  std::optional<util::TlsClientPem> tls_;
  std::string tls_ca_source_;
  OutputFormat output_;
  std::ostream& out_;
  std::ostream& err_;
  bool out_is_terminal_;
  std::unique_ptr<Client> client_;
};

// The exit code for an error from the client library (see the table above).
int ExitCodeFor(const absl::Status& status);

// Every subcommand's first step: parses `argv` into `args` (made from the command table:
// command_table.h ArgsFor). On --help prints the command's generated --help to out and returns
// kExitOk; on a bad flag prints "zpipe COMMAND: <the problem>" and the usage line to err and
// returns kExitUsage; returns nullopt when the command should go on (after printing
// "zpipe COMMAND: warning: ..." for each deprecated spelling used).
std::optional<int> ParseCommandArgs(CliContext& ctx, const std::string& command, Args& args,
                                    const std::vector<std::string>& argv);

// Fixed-width text tables: Add rows of cells; Print pads every column to its widest cell. Cells
// may hold peer strings as received: Print shows each through util::SanitizeForTerminal, so a
// cell stays on its line and carries no terminal controls.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "12s", "3m04s", "2h01m"; "-" for unset.
std::string FormatDuration(double seconds);
// RFC 3339 in UTC, seconds precision; "-" for an unset timestamp.
std::string FormatTime(int64_t seconds_since_epoch);
// A Job's short one-line description: "job1 running 12/50 iterations"; the reason, when there is
// one, sanitized for the terminal.
std::string JobLine(const v1::Job& job);

// The subcommands. `args` exclude "zpipe" and the command name; global flags are already gone.
int RunSubmitCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunStatusCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunListCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunCancelCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunDeleteCommand(CliContext& ctx, const std::vector<std::string>& args);  // delete ID...
int RunWatchCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunWorkersCommand(CliContext& ctx, const std::vector<std::string>& args);
int RunLogsCommand(CliContext& ctx, const std::vector<std::string>& args);     // logs ID [--follow]
int RunJobPlanCommand(CliContext& ctx, const std::vector<std::string>& args);  // plan --job ID
int RunRunCommand(CliContext& ctx, const std::vector<std::string>& args);      // run FILE --local
// A TorchScript job's cuts and measured per-stage costs (nothing for other models).
void PrintModelLayout(std::ostream& out, const v1::ModelLayout& layout);
int RunExportCommand(CliContext& ctx, const std::vector<std::string>& args);  // export ID -f FILE
// `zpipe version`: this zpipe's build and, with a coordinator to ask, the coordinator's.
int RunVersionCommand(CliContext& ctx, const std::vector<std::string>& args);
// This zpipe's build (the generated zpipe/build_info.h) as the coordinator reports its own; its
// one-line form is cli_common.h's ClientVersionLine().
v1::ServerInfo ClientBuildInfo();
// `zpipe config ...`: the contexts of the config file (cli_config.h); asks no coordinator.
int RunConfigCommand(CliContext& ctx, const std::vector<std::string>& args);
// The function that runs the coordinator command `name` (submit, status, ..., version, config);
// nullptr for a name the command table does not have or one the lean zpipe runs itself
// (completion). The command table (command_table.h) holds only what each command is.
using CommandRun = int (*)(CliContext& ctx, const std::vector<std::string>& args);
CommandRun CommandRunner(absl::string_view name);

// The KEY=VALUE labels given to a repeatable `flag` (submit --label, list --label), the last
// value of a key winning; INVALID_ARGUMENT naming the flag and the value without '=' or key.
// The coordinator checks the keys and values themselves (JobSpec.labels).
absl::StatusOr<std::map<std::string, std::string>> ParseLabelArgs(const Args& args,
                                                                  const std::string& flag);
// "team=nlp,size=big": the labels of a job, by key; "-" when it has none.
std::string FormatLabels(const v1::JobSpec& spec);

// --limit N and --continue TOKEN of a listing that pages (list, workers).
struct PageArgs {
  std::optional<int> limit;  // nullopt: every page
  std::string token;         // --continue
};
// INVALID_ARGUMENT naming the flag: --limit out of 1..1000, --continue without --limit.
absl::StatusOr<PageArgs> ParsePageArgs(const Args& args);
// After a page: when `next_token` is set, says on stderr how to ask for the next one
// ("more: zpipe COMMAND ... --limit N --continue TOKEN"; `command_line` is the command and the
// flags that select what is listed).
void PrintNextPageHint(CliContext& ctx, const std::string& command_line, const PageArgs& page,
                       const std::string& next_token);

// Follows `job_id` until it is terminal, rendering its events (progress_view.cc), and returns
// kExitOk if it SUCCEEDED, kExitJobFailed if it FAILED or was CANCELLED. `live` draws per-rank
// bars in place (a terminal); otherwise one plain line per state change / iteration.
// `quiet` prints only the final line (submit --wait). `observer`, when set, sees every event
// first (zpipe run keeps the iteration summaries).
int FollowJob(CliContext& ctx, const std::string& command, const std::string& job_id, bool live,
              bool quiet, const std::function<void(const v1::JobEvent&)>& observer = nullptr);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_CLI_H_
