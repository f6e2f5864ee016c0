// `zpipe submit FILE [--id ID] [--wait | --follow] [--dry-run]`
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/job_file.h"
#include "client/json_output.h"

namespace zpipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: zpipe submit FILE.yaml|FILE.json [--id ID] [--wait | --follow] [--dry-run]\n"
    "  --id ID    job id (makes the submit idempotent); default: the coordinator picks one\n"
    "  --wait     wait until the job ends; exit 0 if it succeeded, 1 if it failed or was "
    "cancelled\n"
    "  --follow   like --wait, showing live progress (per-rank F/B/W bars on a terminal)\n"
    "  --dry-run  validate and plan only; print the predicted statistics, create nothing\n";

}  // namespace

int RunSubmitCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args;
  args.Flag("--id").Switch("--wait").Switch("--follow").Switch("--dry-run");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "submit", args, argv, kUsage)) return *exit;
  if (args.positionals().size() != 1)
    return ctx.Usage("submit", "expected exactly one job file", kUsage);
  const bool wait = args.Has("--wait");
  const bool follow = args.Has("--follow");
  const bool dry_run = args.Has("--dry-run");
  if (wait && follow) return ctx.Usage("submit", "--wait and --follow exclude each other", kUsage);
  if (dry_run && (wait || follow))
    return ctx.Usage("submit", "--dry-run creates no job to wait for", kUsage);

  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(args.positionals()[0]);
  if (!spec.ok()) {
    ctx.err() << "zpipe submit: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<SubmitResult> result = ctx.client().Submit(*spec, args.Get("--id"), dry_run);
  if (!result.ok()) return ctx.Fail("submit", result.status());
  const v1::Job& job = result->job;

  if (ctx.json() && dry_run) {
    // Nothing was created: what the spec resolves to and what the plan predicts.
    PrintJson(ctx.out(),
              Json{{"spec", SpecJson(job.spec())}, {"predicted", MessageJson(job.predicted())}});
    return kExitOk;
  }
  if (ctx.json() && !wait) {
    // With --follow the events follow as JSON lines, so the response takes one line too.
    PrintJson(ctx.out(), Json{{"job", JobJson(job)}, {"created", result->created}},
              /*pretty=*/!follow);
    if (!follow) return kExitOk;
  } else if (!ctx.json()) {
    if (dry_run) {
      const v1::PlanStats& p = job.predicted();
      ctx.out() << absl::StrFormat(
          "spec is valid; predicted makespan %.2f ms, bubble %.1f%%, %d actions\n", p.makespan_ms(),
          p.bubble_rate() * 100, p.num_actions());
      return kExitOk;
    }
    ctx.out() << (result->created ? "submitted job " : "job already submitted: ") << job.id()
              << " (" << JobStateName(job.state()) << ")\n";
  }
  if (!wait && !follow) return kExitOk;
  return FollowJob(ctx, "submit", job.id(), /*live=*/follow && ctx.out_is_terminal(),
                   /*quiet=*/wait);
}

}  // namespace zpipe::cli
