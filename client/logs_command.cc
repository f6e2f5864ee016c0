// `zpipe logs ID [--rank R] [--follow] [--tail N] [--since WHEN]`: the log lines the workers
// forwarded for a job, each with its time and rank.
#include <limits>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "util/sanitize.h"
#include "flags/values.h"

namespace zpipe::cli {
namespace {

absl::Time TimeOf(const v1::LogLine& line) {
  return absl::FromUnixSeconds(line.time().seconds()) + absl::Nanoseconds(line.time().nanos());
}

std::string FormatLineTime(const v1::LogLine& line) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", TimeOf(line), absl::UTCTimeZone());
}

// --rank, --follow, --tail, --since.
absl::StatusOr<LogsOptions> ReadOptions(const Args& args) {
  LogsOptions options;
  options.follow = args.Has("--follow");
  if (args.Has("--rank")) {
    absl::StatusOr<int64_t> rank = args.Integer("--rank", 0, std::numeric_limits<int>::max());
    if (!rank.ok()) return rank.status();
    options.rank = static_cast<int>(*rank);
  }
  if (args.Has("--tail")) {
    absl::StatusOr<int64_t> tail = args.Integer("--tail", 0, std::numeric_limits<int>::max());
    if (!tail.ok()) return tail.status();
    options.tail = static_cast<int>(*tail);
  }
  if (args.Has("--since")) {
    // A duration back from now (flags/values.h, as every duration flag), or a time.
    const std::string when = args.Get("--since");
    absl::StatusOr<absl::Duration> back = flags::ParseDuration(when);
    absl::Time at;
    std::string error;
    if (back.ok() && *back >= absl::ZeroDuration()) {
      options.since = absl::Now() - *back;
    } else if (absl::ParseTime(absl::RFC3339_full, when, &at, &error)) {
      options.since = at;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--since: want a duration (10m) or an RFC 3339 time, got '", when, "'"));
    }
  }
  return options;
}

}  // namespace

int RunLogsCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("logs");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "logs", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("logs", "expected one job id");
  absl::StatusOr<LogsOptions> options = ReadOptions(args);
  if (!options.ok()) return ctx.Usage("logs", options.status().message());
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
      args.positionals()[0], *options,
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
