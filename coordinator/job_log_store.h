// JobLogStore: the log lines workers forward for the ranks they run (worker.proto JobLogBatch),
// per job and rank, for GetJobLogs, `zpipe logs` and the live page.
//
// Bounded twice: each rank keeps its newest `lines_per_rank` lines (older ones are dropped and
// counted, as are the lines the worker itself dropped), and only the `max_jobs` jobs that most
// recently received lines are kept. In memory only: a restarted coordinator holds the lines
// workers send from then on (those they kept while it was away included), not earlier ones; a
// job's lines are rarely worth a database write per line, and the workers' own logs keep all.
//
// Besides the workers' lines, the coordinator writes one line per completed iteration of a job
// (loss, eval loss, tokens/s, bubble: AppendJobLine), kept under the pseudo-rank
// (kJobRank, kJobRank) and bounded like a rank's; a query for one rank leaves them out.
//
// Every line gets a per-job sequence number, increasing in arrival order, so a reader can follow
// (WaitForLinesAfter) and resume. A store numbers from the microseconds since the Unix epoch at
// its creation, so the numbers also increase across a coordinator restart and a follower resuming
// after its last line misses none of the new coordinator's. Thread-safe; Append never blocks on
// readers.
#ifndef ZPIPE_COORDINATOR_JOB_LOG_STORE_H_
#define ZPIPE_COORDINATOR_JOB_LOG_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zpipe::coordinator {

struct LogLineData {
  absl::Time time;  // worker clock
  std::string text;
  int pipeline_rank = 0;
  int data_rank = 0;
  uint64_t sequence = 0;
};

// The line's global rank (data_rank * p + pipeline_rank), or kJobRank (-1) for the
// coordinator's lines about the whole job.
int GlobalRank(const LogLineData& line, int pipeline_size);

struct LogQuery {
  // Only this (pipeline_rank, data_rank); nullopt = every rank.
  std::optional<std::pair<int, int>> rank;
  uint64_t after_sequence = 0;              // only lines with a higher sequence
  absl::Time since = absl::InfinitePast();  // only lines written at or after this
  int tail = 0;                             // only the last N matching lines; 0 = all
};

struct LogRead {
  std::vector<LogLineData> lines;  // in sequence order
  // Lines of the selected ranks dropped by the bounds (worker's and ours) so far.
  uint64_t dropped = 0;
  uint64_t last_sequence = 0;  // the job's highest sequence (0 when it has no lines)
};

class JobLogStore {
 public:
  static constexpr size_t kDefaultLinesPerRank = 1000;
  static constexpr size_t kDefaultMaxJobs = 200;
  // A rank index a worker may report lines for: [0, kMaxRank).
  static constexpr int kMaxRank = 1 << 16;
  // The pipeline and data rank of the lines the coordinator writes about the whole job.
  static constexpr int kJobRank = -1;

  explicit JobLogStore(size_t lines_per_rank = kDefaultLinesPerRank,
                       size_t max_jobs = kDefaultMaxJobs);

  // Adds `lines` (in the order the worker wrote them) for rank (pipeline_rank, data_rank);
  // `dropped_by_worker` lines of that rank were lost before them. Ranks outside [0, kMaxRank) are
  // ignored.
  void Append(const std::string& job_id, int pipeline_rank, int data_rank,
              std::vector<std::pair<absl::Time, std::string>> lines, uint64_t dropped_by_worker);

  // Adds one line the coordinator writes about the whole job (rank kJobRank).
  void AppendJobLine(const std::string& job_id, absl::Time time, std::string text);

  // The held lines of `job_id` that `query` selects; empty for a job without lines.
  LogRead Read(const std::string& job_id, const LogQuery& query) const;

  // Blocks until the job has a line with sequence > after, `deadline` passes or Close(); returns
  // whether it has one.
  bool WaitForLinesAfter(const std::string& job_id, uint64_t after, absl::Time deadline) const;

  // Drops every line held for the job (a deleted job).
  void Forget(const std::string& job_id);

  // Wakes every waiter (shutdown); later waits return at once.
  void Close();

  size_t lines_per_rank() const { return lines_per_rank_; }

 private:
  struct RankLog {
    std::deque<LogLineData> lines;
    uint64_t dropped = 0;
  };
  struct JobLog {
    std::map<std::pair<int, int>, RankLog> ranks;
    uint64_t last_sequence = 0;
    uint64_t touched = 0;  // recency, for evicting whole jobs
  };

  void AppendLocked(const std::string& job_id, std::pair<int, int> rank,
                    std::vector<std::pair<absl::Time, std::string>> lines,
                    uint64_t dropped_by_worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t lines_per_rank_;
  const size_t max_jobs_;
  const uint64_t first_sequence_;  // a job's first line gets first_sequence_ + 1
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobLog> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_LOG_STORE_H_
