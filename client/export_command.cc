// `zpipe export JOB_ID -f FILE [--checkpoint-dir DIR]`: the trained model of a job, from its
// latest complete checkpoint (the job's checkpoint.dir/NAME, which must be reachable from here).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "client/local_cluster.h"
#include "client/model_export.h"

namespace zpipe::cli {
namespace {

namespace fs = std::filesystem;

}  // namespace

int RunExportCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("export");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "export", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("export", "expected one job id");
  if (!args.Has("--file")) return ctx.Usage("export", "-f FILE is required");
  absl::StatusOr<v1::Job> job = ctx.client().Get(args.positionals()[0]);
  if (!job.ok()) return ctx.Fail("export", job.status());
  const v1::JobSpec& spec = job->spec();
  if (!spec.model().has_torchscript() && !spec.model().has_gpt()) {
    return ctx.Fail("export", absl::FailedPreconditionError(absl::StrCat(
                                  "job ", job->id(), " trains a synthetic model: no weights")));
  }
  std::string dir =
      args.Has("--checkpoint-dir") ? args.Get("--checkpoint-dir") : spec.checkpoint().dir();
  if (dir.empty()) {
    return ctx.Fail("export", absl::FailedPreconditionError(absl::StrCat(
                                  "job ", job->id(),
                                  " saves no checkpoints (set checkpoint.every and checkpoint.dir; "
                                  "zpipe run --out exports by itself)")));
  }
  absl::StatusOr<std::string> worker = FindBinary("zpipe-worker", "ZPIPE_WORKER_BIN", "worker");
  if (!worker.ok()) return ctx.Fail("export", worker.status());
  const fs::path out = args.Get("--file");
  absl::StatusOr<std::string> done = ExportModel(*worker, fs::path(dir) / spec.name(), out);
  if (!done.ok()) return ctx.Fail("export", done.status());
  if (ctx.json()) {
    PrintDocument(ctx, Json{{"job_id", job->id()}, {"file", out.string()}, {"report", *done}},
                  /*stream=*/true);
  } else {
    ctx.out() << *done << "\n";
  }
  return kExitOk;
}

}  // namespace zpipe::cli
