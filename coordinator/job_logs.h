// Reading a job's log lines (JobLogStore) for a caller: checks the request against the job (it
// exists, the rank is one of its ranks), follows new lines until the job ends, and prints a line
// as text. Shared by GetJobLogs (coordinator_service.cc) and the HTTP /api/jobs/ID/logs.
#ifndef ZPIPE_COORDINATOR_JOB_LOGS_H_
#define ZPIPE_COORDINATOR_JOB_LOGS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/job_log_store.h"
#include "coordinator/job_manager.h"

namespace zpipe::coordinator {

struct JobLogsRequest {
  std::string job_id;
  std::optional<int> rank;  // global rank: data_rank * p + pipeline_rank
  int tail = 0;
  absl::Time since = absl::InfinitePast();
  uint64_t after_sequence = 0;
  bool follow = false;
};

// After a followed job is terminal, lines still arriving (a cancelled rank's teardown, the last
// batch after RankFinished) are waited for until none came for kLogQuietPeriod, at most
// kLogTrailLimit.
inline constexpr absl::Duration kLogQuietPeriod = absl::Seconds(1);
inline constexpr absl::Duration kLogTrailLimit = absl::Seconds(5);

// Calls `write` with the lines `request` selects, in batches (the first carries the dropped
// count), until they are all sent, or with `follow` until the job is terminal and its trailing
// lines are in. NOT_FOUND for an unknown job; INVALID_ARGUMENT "rank: ..." / "tail: ..." for a
// bad request; CANCELLED when `write` returns false or `cancelled` returns true; UNAVAILABLE when
// the coordinator shuts down meanwhile. `p` gets the job's pipeline size (for global ranks).
absl::Status StreamJobLogs(JobManager& manager, const JobLogsRequest& request,
                           const std::function<bool(const LogRead& batch, int p)>& write,
                           const std::function<bool()>& cancelled);

// "2026-12-01T01:02:03.456Z rank R: TEXT" with the global rank R, for a job of pipeline size p.
std::string FormatLogLine(const LogLineData& line, int p);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_LOGS_H_
