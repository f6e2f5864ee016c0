#include "coordinator/job_logs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zpipe::coordinator {

absl::Status StreamJobLogs(JobManager& manager, const JobLogsRequest& request,
                           const std::function<bool(const LogRead& batch, int p)>& write,
                           const std::function<bool()>& cancelled) {
  absl::StatusOr<JobView> view = manager.Get(request.job_id, /*with_microbatches=*/false);
  if (!view.ok()) return view.status();
  const int p = std::max(1, view->record.spec.pipeline);
  const int world = p * view->record.spec.data_parallel();
  LogQuery query;
  if (request.rank.has_value()) {
    if (*request.rank < 0 || *request.rank >= world) {
      return absl::InvalidArgumentError(absl::StrCat("rank: must be in [0, ", world, ") for job '",
                                                     request.job_id, "' (p=", p, ", d=", world / p,
                                                     "), got ", *request.rank));
    }
    query.rank = std::make_pair(*request.rank % p, *request.rank / p);
  }
  if (request.tail < 0) {
    return absl::InvalidArgumentError(absl::StrCat("tail: must be >= 0, got ", request.tail));
  }
  query.tail = request.tail;
  query.since = request.since;
  query.after_sequence = request.after_sequence;
  JobLogStore& store = manager.logs();
  const absl::Status gone = absl::CancelledError("reader went away");

  LogRead read = store.Read(request.job_id, query);
  if (!write(read, p)) return gone;
  if (!request.follow) return absl::OkStatus();
  query.tail = 0;
  query.after_sequence = std::max(query.after_sequence, read.last_sequence);
  std::optional<absl::Time> terminal_at;
  absl::Time last_line = absl::Now();
  while (true) {
    if (cancelled()) return gone;
    const absl::Time now = absl::Now();
    if (terminal_at.has_value() &&
        (now - last_line >= kLogQuietPeriod || now - *terminal_at >= kLogTrailLimit)) {
      return absl::OkStatus();
    }
    if (store.WaitForLinesAfter(request.job_id, query.after_sequence,
                                absl::Now() + absl::Milliseconds(250))) {
      read = store.Read(request.job_id, query);
      read.dropped = 0;  // counted in the first batch
      if (!read.lines.empty()) {
        last_line = absl::Now();
        if (!write(read, p)) return gone;
      }
      query.after_sequence = std::max(query.after_sequence, read.last_sequence);
    } else if (manager.events().closed()) {
      return absl::UnavailableError("coordinator shutting down");
    }
    if (!terminal_at.has_value()) {
      absl::StatusOr<JobView> now_view = manager.Get(request.job_id, /*with_microbatches=*/false);
      if (!now_view.ok()) return now_view.status();
      if (IsTerminal(now_view->record.state)) {
        terminal_at = absl::Now();
        last_line = std::max(last_line, *terminal_at);
      }
    }
  }
}

std::string FormatLogLine(const LogLineData& line, int p) {
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", line.time, absl::UTCTimeZone()),
                      line.pipeline_rank == JobLogStore::kJobRank
                          ? std::string(" job: ")
                          : absl::StrCat(" rank ", GlobalRank(line, p), ": "),
                      line.text);
}

}  // namespace zpipe::coordinator
