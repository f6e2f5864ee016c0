// `zpipe watch ID`: follow a job until it ends (exit 0 if it succeeded, 1 otherwise).
#include "client/cli.h"
#include "client/command_table.h"

namespace zpipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: zpipe watch JOB_ID\n"
    "  live per-rank F/B/W bars on a terminal, one line per state change and iteration otherwise;\n"
    "  with -o json one JSON event per line (-o yaml: one YAML document per event)\n";

}  // namespace

int RunWatchCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("watch");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "watch", args, argv, kUsage)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("watch", "expected one job id", kUsage);
  return FollowJob(ctx, "watch", args.positionals()[0], ctx.out_is_terminal(), /*quiet=*/false);
}

}  // namespace zpipe::cli
