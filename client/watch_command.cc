// `zpipe watch ID`: follow a job until it ends (exit 0 if it succeeded, 1 otherwise).
#include "client/cli.h"
#include "client/command_table.h"

namespace zpipe::cli {

int RunWatchCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("watch");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "watch", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("watch", "expected one job id");
  return FollowJob(ctx, "watch", args.positionals()[0], ctx.out_is_terminal(), /*quiet=*/false);
}

}  // namespace zpipe::cli
