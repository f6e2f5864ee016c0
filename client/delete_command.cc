// `zpipe delete ID [ID...] [--force]`
#include <ostream>

#include "client/cli.h"
#include "client/command_table.h"

namespace zpipe::cli {

int RunDeleteCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("delete");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "delete", args, argv)) return *exit;
  if (args.positionals().empty()) return ctx.Usage("delete", "expected one or more job ids");
  const bool force = args.Has("--force");
  // Each job on its own: one that cannot be deleted does not keep the others; the exit code is
  // the first failure's.
  int exit = kExitOk;
  for (const std::string& id : args.positionals()) {
    absl::StatusOr<v1::JobState> state = ctx.client().Delete(id, force);
    if (!state.ok()) {
      const int code = ctx.Fail("delete", state.status());
      if (exit == kExitOk) exit = code;
      continue;
    }
    if (ctx.names()) {
      ctx.out() << id << "\n";
    } else {
      ctx.out() << id << " deleted (" << JobStateName(*state) << ")\n";
    }
  }
  return exit;
}

}  // namespace zpipe::cli
