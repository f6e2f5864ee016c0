// `zpipe list [--state STATE[,STATE...]] [-l KEY=VALUE ...] [--since DURATION] [--limit N
// [--continue TOKEN]]`: jobs, oldest first; the filters apply on the coordinator, before paging.
#include <ostream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "flags/values.h"

namespace zpipe::cli {

int RunListCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("list");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "list", args, argv)) return *exit;
  if (!args.positionals().empty()) return ctx.Usage("list", "takes no arguments");
  std::vector<v1::JobState> states;
  if (args.Has("--state")) {
    for (absl::string_view name : absl::StrSplit(args.Get("--state"), ',', absl::SkipEmpty())) {
      absl::StatusOr<v1::JobState> state = ParseJobState(std::string(name));
      if (!state.ok()) return ctx.Usage("list", std::string(state.status().message()));
      states.push_back(*state);
    }
  }
  absl::StatusOr<PageArgs> paging = ParsePageArgs(args);
  if (!paging.ok()) return ctx.Usage("list", paging.status().message());
  ListJobsOptions options;
  options.states = states;
  absl::StatusOr<std::map<std::string, std::string>> labels = ParseLabelArgs(args, "--label");
  if (!labels.ok()) return ctx.Usage("list", labels.status().message());
  options.labels = *std::move(labels);
  if (args.Has("--since")) {
    absl::StatusOr<absl::Duration> since = flags::ParseDuration(args.Get("--since"));
    if (!since.ok() || *since < absl::ZeroDuration()) {
      return ctx.Usage("list", absl::StrCat("--since: ", since.ok() ? "must not be negative"
                                                                     : since.status().message()));
    }
    options.created_after = absl::Now() - *since;
  }
  absl::StatusOr<std::vector<v1::Job>> jobs;
  std::string next_token;
  if (paging->limit) {
    options.page_size = *paging->limit;
    options.page_token = paging->token;
    absl::StatusOr<JobPage> page = ctx.client().List(options);
    if (page.ok()) {
      jobs = std::move(page->jobs);
      next_token = page->next_page_token;
    } else {
      jobs = page.status();
    }
  } else {
    jobs = ctx.client().ListAll(options);
  }
  if (!jobs.ok()) return ctx.Fail("list", jobs.status());
  // The flags that select the jobs, for the next page's command line.
  std::string command_line = "list";
  if (args.Has("--state")) absl::StrAppend(&command_line, " --state ", args.Get("--state"));
  for (const auto& [key, value] : options.labels) {
    absl::StrAppend(&command_line, " -l ", key, "=", value);
  }
  if (args.Has("--since")) absl::StrAppend(&command_line, " --since ", args.Get("--since"));
  // After the page, whichever way it is printed.
  absl::Cleanup hint = [&] { PrintNextPageHint(ctx, command_line, *paging, next_token); };
  if (ctx.json()) {
    Json doc = JobListJson(*jobs);
    if (!next_token.empty()) doc["next_page_token"] = next_token;
    PrintDocument(ctx, doc);
    return kExitOk;
  }
  if (ctx.names()) {
    for (const v1::Job& job : *jobs) ctx.out() << job.id() << "\n";
    return kExitOk;
  }
  std::vector<std::string> header = {"ID", "NAME", "STATE", "SCHEDULE", "P",
                                     "D",  "M",    "ITER",  "CREATED"};
  if (ctx.wide()) header.insert(header.end(), {"STARTED", "ENDED", "LABELS", "REASON"});
  Table t(header);
  for (const v1::Job& job : *jobs) {
    const v1::JobSpec& s = job.spec();
    std::vector<std::string> row = {
        job.id(), s.name(), JobStateName(job.state()), s.schedule().kind(),
        absl::StrCat(s.parallel().pipeline()), absl::StrCat(std::max(1, s.parallel().data())),
        absl::StrCat(s.batch().microbatches()),
        absl::StrCat(job.progress().iterations_done(), "/", s.train().iterations()),
        FormatTime(job.create_time().seconds())};
    if (ctx.wide()) {
      row.insert(row.end(), {FormatTime(job.start_time().seconds()),
                             FormatTime(job.end_time().seconds()), FormatLabels(s),
                             job.reason().empty() ? "-" : job.reason()});
    }
    t.Add(std::move(row));
  }
  t.Print(ctx.out());
  return kExitOk;
}

}  // namespace zpipe::cli
