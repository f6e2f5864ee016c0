// `zpipe submit FILE [--id ID] [--wait | --follow] [--dry-run] [--upload] [--parse-only]`
#include <filesystem>
#include <iostream>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "artifact/artifact_ref.h"
#include "artifact/sha256.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/job_file.h"
#include "client/json_output.h"

namespace zpipe::cli {
namespace {

// Uploads every file the spec names that is not already an artifact reference and names it by
// its reference instead; what was sent goes to stderr, so `-o json` output stays one document.
absl::Status UploadFiles(CliContext& ctx, const std::string& job_file, v1::JobSpec& spec) {
  const std::filesystem::path base = std::filesystem::path(job_file).parent_path();
  for (const artifact::FileField& field : artifact::FileFields(spec)) {
    if (field.path->empty() || artifact::IsArtifactRef(*field.path)) continue;
    const std::filesystem::path file = base / *field.path;
    absl::StatusOr<artifact::FileDigest> digest = artifact::HashFile(file.string());
    if (!digest.ok()) {
      return absl::Status(digest.status().code(),
                          absl::StrCat(field.name, ": ", digest.status().message()));
    }
    absl::StatusOr<UploadedArtifact> uploaded =
        ctx.client().UploadArtifact(file.string(), digest->sha256, digest->size);
    if (!uploaded.ok()) {
      return absl::Status(uploaded.status().code(),
                          absl::StrCat(field.name, ": uploading '", file.string(),
                                       "': ", uploaded.status().message()));
    }
    ctx.err() << (uploaded->created ? "uploaded " : "already on the coordinator: ")
              << file.string() << " (" << digest->size << " bytes) as " << uploaded->ref << "\n";
    *field.path = uploaded->ref;
  }
  return absl::OkStatus();
}

// The job file at `path`, or from standard input for "-".
absl::StatusOr<v1::JobSpec> ReadJobFile(const std::string& path) {
  return path == "-" ? ReadJobSpec(std::cin) : LoadJobFile(path);
}

// --parse-only: the spec the job file makes, printed; nothing is sent. A refused file is reported
// as submit reports it (stderr, exit 2) and, for programs reading -o json/yaml, as the error
// object of the JSON vocabulary on stdout.
int PrintParsedSpec(CliContext& ctx, const std::string& job_file) {
  absl::StatusOr<v1::JobSpec> spec = ReadJobFile(job_file);
  if (!spec.ok()) {
    if (ctx.json()) PrintDocument(ctx, api::ErrorJson(spec.status()));
    ctx.err() << "zpipe submit: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  if (ctx.json()) {
    PrintDocument(ctx, Json{{"spec", SpecJson(*spec)}});
  } else if (!ctx.names()) {
    ctx.out() << JsonToYaml(SpecJson(*spec)) << "\n";
  }
  return kExitOk;
}

}  // namespace

int RunSubmitCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("submit");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "submit", args, argv)) return *exit;
  if (args.positionals().size() + (args.Has("--file") ? 1 : 0) != 1)
    return ctx.Usage("submit", "expected exactly one job file");
  const std::string job_file = args.Has("--file") ? args.Get("--file") : args.positionals()[0];
  const bool wait = args.Has("--wait");
  const bool follow = args.Has("--follow");
  const bool dry_run = args.Has("--dry-run");
  if (wait && follow) return ctx.Usage("submit", "--wait and --follow exclude each other");
  if (dry_run && (wait || follow))
    return ctx.Usage("submit", "--dry-run creates no job to wait for");
  if (args.Has("--parse-only")) {
    if (wait || follow || dry_run || args.Has("--upload") || args.Has("--id") ||
        args.Has("--label")) {
      return ctx.Usage("submit", "--parse-only reads the job file only; it takes no other flag");
    }
    return PrintParsedSpec(ctx, job_file);
  }

  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabelArgs(args, "--label");
  if (!labels.ok()) return ctx.Usage("submit", labels.status().message());
  absl::StatusOr<v1::JobSpec> spec = ReadJobFile(job_file);
  if (!spec.ok()) {
    ctx.err() << "zpipe submit: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  for (const auto& [key, value] : *labels) (*spec->mutable_labels())[key] = value;
  if (args.Has("--upload")) {
    if (absl::Status st = UploadFiles(ctx, job_file, *spec); !st.ok()) {
      return ctx.Fail("submit", st);
    }
  }
  absl::StatusOr<SubmitResult> result = ctx.client().Submit(*spec, args.Get("--id"), dry_run);
  if (!result.ok()) return ctx.Fail("submit", LocateInJobFile(result.status(), job_file));
  const v1::Job& job = result->job;

  if (ctx.json() && dry_run) {
    // Nothing was created: what the spec resolves to and what the plan predicts.
    PrintDocument(
        ctx, Json{{"spec", SpecJson(job.spec())}, {"predicted", MessageJson(job.predicted())}});
    return kExitOk;
  }
  if (ctx.json() && !wait) {
    // With --follow the events follow as JSON lines, so the response takes one line too.
    PrintDocument(ctx, Json{{"job", JobJson(job)}, {"created", result->created}},
                  /*stream=*/follow);
    if (!follow) return kExitOk;
  } else if (ctx.names()) {
    if (!dry_run) ctx.out() << job.id() << "\n";  // a dry run names nothing
  } else if (!ctx.json()) {
    if (dry_run) {
      const v1::PlanStats& p = job.predicted();
      ctx.out() << absl::StrFormat(
          "spec is valid; predicted span %.2f ms (makespan %.2f ms), bubble %.1f%%, %d actions\n",
          p.span_ms(), p.makespan_ms(), p.bubble_rate() * 100, p.num_actions());
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
