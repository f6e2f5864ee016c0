// TraceStore: the executed action times of each job's last few iterations, per rank, and each
// worker's estimated clock offset, so GetTrace can show all ranks on the coordinator's clock.
// Actions are compute (F, B, W, BW), sends and receives (posted -> complete) and reductions, all
// stamped on the worker's clock and aligned by the same offset.
//
// Complete iteration: every rank has reported each compute action of its plan and, when it
// reports communication at all, each send and receive of its plan (so a rank's last sends are
// there too). Reductions are not counted (a worker's buckets may differ from the plan's).
//
// Clock alignment. Workers stamp actions with their own wall clock. For every message carrying a
// worker time t_w (a heartbeat's send time, or the last end time in a progress batch, which is at
// or before its send time) that the coordinator receives at its own time t_c, the sample
//   s = t_c - t_w = theta + d
// where theta is the true offset (coordinator clock - worker clock) and d >= 0 is the time from
// the stamp to the receipt (queueing in the worker's batcher, network, the coordinator's reader).
// Every sample over-estimates theta, so the estimate is the minimum over a sliding window (the
// last kClockWindow seconds, at most kClockSamples samples: long enough to catch a message that
// got through quickly, short enough to follow clock steps and drift):
//   theta_hat = min s = theta + d_min,   0 <= theta_hat - theta <= d_min.
// The error is one-sided and bounded by the fastest message's delay: on one host (theta = 0) the
// estimate is that delay itself, typically well under a millisecond for a heartbeat over
// loopback. Without samples the offset is taken as 0.
//
// Memory is bounded: per rank only the last kKeepIterations iterations are kept, and at most
// kMaxActionsPerIteration actions per rank and iteration. Thread-safe; ingest takes only the
// rank's own lock.
#ifndef ZPIPE_COORDINATOR_TRACE_STORE_H_
#define ZPIPE_COORDINATOR_TRACE_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "core/executed_timeline.h"
#include "core/plan.h"

namespace zpipe::coordinator {

struct ClockOffset {
  double offset_s = 0;  // coordinator clock - worker clock
  int samples = 0;      // 0 = no estimate
};

// Offset estimation for one worker (see the file comment). Not thread-safe.
class ClockOffsetEstimator {
 public:
  static constexpr absl::Duration kWindow = absl::Seconds(60);
  static constexpr size_t kMaxSamples = 256;

  // A message stamped `worker_time` on the worker, received at `received` on the coordinator.
  void AddSample(absl::Time received, double worker_time_s);
  ClockOffset Estimate() const;

 private:
  std::deque<std::pair<absl::Time, double>> samples_;  // (received, offset sample)
};

// A rank's executed actions of one iteration, aligned to the coordinator's clock.
struct TracedRank {
  RankSlot slot;
  ClockOffset clock;
  std::vector<core::TimedAction> actions;  // completion order; seconds since the Unix epoch
};

struct JobTrace {
  int iteration = 0;
  bool complete = false;
  std::vector<TracedRank> ranks;          // by global rank
  std::vector<int> available_iterations;  // ascending
};

class TraceStore {
 public:
  static constexpr int kKeepIterations = 8;
  static constexpr size_t kMaxActionsPerIteration = 1 << 16;
  static constexpr size_t kMaxJobs = 32;  // the most recently started jobs are kept

  // Starts tracing a scheduled job (replacing a previous attempt). `ranks` by global rank;
  // `plan` gives each rank's expected compute, send and receive actions per iteration (what
  // "complete" means).
  void StartJob(const std::string& job_id, const core::Plan& plan,
                const std::vector<RankSlot>& ranks);

  // Executed actions of (pipeline_rank, data_rank), times on the worker's clock. Ignored for an
  // unknown job or a rank `worker_name` does not hold.
  void AddActions(const std::string& job_id, const std::string& worker_name, int pipeline_rank,
                  int data_rank, absl::Span<const int32_t> iterations,
                  absl::Span<const core::Action> actions, absl::Span<const double> start_s,
                  absl::Span<const double> end_s);

  // A clock sample for `worker_name` (see the file comment).
  void ObserveClock(const std::string& worker_name, absl::Time received, double worker_time_s);
  ClockOffset Offset(const std::string& worker_name) const;

  // `iteration` nullopt = the latest complete one. NotFound for an unknown job or an iteration
  // not held; FailedPrecondition when none is complete yet.
  absl::StatusOr<JobTrace> Get(const std::string& job_id, std::optional<int> iteration) const;
  // Drops the job's timeline (a deleted job).
  void Forget(const std::string& job_id);

 private:
  struct RankState {
    mutable absl::Mutex mu;
    RankSlot slot;             // immutable after StartJob
    int expected_compute = 0;  // immutable after StartJob
    int expected_comm = 0;     // sends and receives; immutable after StartJob
    std::map<int, std::vector<core::TimedAction>> iterations ABSL_GUARDED_BY(mu);
  };
  struct Job {
    std::vector<std::unique_ptr<RankState>> ranks;  // by global rank
    int pipeline = 1;
  };

  std::shared_ptr<Job> Find(const std::string& job_id) const;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> start_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  mutable absl::Mutex clock_mu_;
  absl::flat_hash_map<std::string, ClockOffsetEstimator> clocks_ ABSL_GUARDED_BY(clock_mu_);
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TRACE_STORE_H_
