// Which function runs each coordinator command of the command table (command_table.cc).
#include "absl/strings/string_view.h"
#include "client/cli.h"
#include "client/trace_command.h"

namespace zpipe::cli {

CommandRun CommandRunner(absl::string_view name) {
  static constexpr struct {
    absl::string_view name;
    CommandRun run;
  } kRunners[] = {
      {"submit", RunSubmitCommand},   {"status", RunStatusCommand},   {"list", RunListCommand},
      {"cancel", RunCancelCommand},   {"delete", RunDeleteCommand},   {"watch", RunWatchCommand},
      {"logs", RunLogsCommand},       {"workers", RunWorkersCommand}, {"plan", RunJobPlanCommand},
      {"trace", RunTraceCommand},     {"run", RunRunCommand},         {"export", RunExportCommand},
      {"version", RunVersionCommand}, {"config", RunConfigCommand},
  };
  for (const auto& r : kRunners) {
    if (r.name == name) return r.run;
  }
  return nullptr;
}

}  // namespace zpipe::cli
