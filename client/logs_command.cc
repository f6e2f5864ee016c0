// `zpipe logs ID [--rank R] [--follow] [--tail N] [--since WHEN]`: the log lines the workers
// forwarded for a job, each with its time and rank.
#include <ostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "util/sanitize.h"

namespace zpipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: zpipe logs JOB_ID [--rank R] [--follow] [--tail N] [--since WHEN]\n"
    "  the log lines the job's workers wrote while they ran it (their failures included), each\n"
    "  as TIME rank R: TEXT (worker clock, UTC; R = data_rank * p + pipeline_rank)\n"
    "  --rank R      only global rank R\n"
    "  --follow      keep printing new lines until the job has ended (-f, which means --file\n"
    "                on every other command, still works here this release, with a warning)\n"
    "  --tail N      only the last N lines the coordinator holds\n"
    "  --since WHEN  only lines written since WHEN: a duration back from now (10m, 1h30m) or an\n"
    "                RFC 3339 time (2026-01-02T15:04:05Z)\n"
    "  -o json       one JSON object per line: time, text, pipeline_rank, data_rank, rank,\n"
    "                sequence (-o yaml: one YAML document per log line)\n"
    "The coordinator keeps the newest lines of each rank (zpipe-coordinator --log-lines) in\n"
    "memory: after it restarts it has the lines workers sent since.\n";

absl::Time TimeOf(const v1::LogLine& line) {
  return absl::FromUnixSeconds(line.time().seconds()) + absl::Nanoseconds(line.time().nanos());
}

std::string FormatLineTime(const v1::LogLine& line) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", TimeOf(line), absl::UTCTimeZone());
}

}  // namespace

int RunLogsCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("logs");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "logs", args, argv, kUsage)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("logs", "expected one job id", kUsage);
  LogsOptions options;
  options.follow = args.Has("--follow");
  if (args.Has("--rank")) {
    int rank = 0;
    if (!absl::SimpleAtoi(args.Get("--rank"), &rank) || rank < 0) {
      return ctx.Usage(
          "logs", absl::StrCat("--rank: want a rank >= 0, got '", args.Get("--rank"), "'"), kUsage);
    }
    options.rank = rank;
  }
  if (args.Has("--tail")) {
    if (!absl::SimpleAtoi(args.Get("--tail"), &options.tail) || options.tail < 0) {
      return ctx.Usage("logs",
                       absl::StrCat("--tail: want a count >= 0, got '", args.Get("--tail"), "'"),
                       kUsage);
    }
  }
  if (args.Has("--since")) {
    const std::string when = args.Get("--since");
    absl::Duration back;
    absl::Time at;
    std::string error;
    if (absl::ParseDuration(when, &back) && back >= absl::ZeroDuration()) {
      options.since = absl::Now() - back;
    } else if (absl::ParseTime(absl::RFC3339_full, when, &at, &error)) {
      options.since = at;
    } else {
      return ctx.Usage(
          "logs",
          absl::StrCat("--since: want a duration (10m) or an RFC 3339 time, got '", when, "'"),
          kUsage);
    }
  }
  uint64_t dropped = 0;
  bool noted = false;
  auto note_dropped = [&] {
    if (noted || dropped == 0) return;
    noted = true;
    ctx.err() << "zpipe logs: " << dropped
              << " older lines of the selected ranks were dropped (the workers and the coordinator "
                 "keep the newest of each rank)\n";
  };
  absl::Status status = ctx.client().Logs(
      args.positionals()[0], options,
      [&](const v1::LogLine& line) {
        note_dropped();
        if (ctx.json()) {
          PrintDocument(ctx, MessageJson(line), /*stream=*/true);
        } else {
          // A worker wrote the text: an embedded \r or \n would overwrite or forge lines.
          // rank -1: the coordinator's line about the whole job (one per iteration).
          ctx.out() << FormatLineTime(line)
                    << (line.rank() < 0 ? std::string(" job: ")
                                        : absl::StrCat(" rank ", line.rank(), ": "))
                    << util::SanitizeForTerminal(line.text()) << "\n";
        }
        ctx.out().flush();
        return true;
      },
      &dropped);
  if (!status.ok()) return ctx.Fail("logs", status);
  note_dropped();
  return kExitOk;
}

}  // namespace zpipe::cli
