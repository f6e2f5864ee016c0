// `zpipe cancel ID [--reason TEXT]`
#include <ostream>

#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"

namespace zpipe::cli {

int RunCancelCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("cancel");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "cancel", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("cancel", "expected one job id");
  absl::StatusOr<v1::Job> job = ctx.client().Cancel(args.positionals()[0], args.Get("--reason"));
  if (!job.ok()) return ctx.Fail("cancel", job.status());
  if (ctx.json()) {
    PrintDocument(ctx, JobJson(*job));
  } else if (ctx.names()) {
    ctx.out() << job->id() << "\n";
  } else {
    ctx.out() << JobLine(*job) << "\n";
  }
  return kExitOk;
}

}  // namespace zpipe::cli
