// ProgressTracker: per job, per rank F/B/W progress of the current iteration, and the assembly of
// per-rank iteration reports into job-wide iteration summaries.
//
// Built for ingest rate: each rank has its own writer lock, so ranks streaming progress never
// contend with each other, and the counters are atomics, so readers (GetJob, WatchJob) never wait
// for a writer (a reader may see a rank mid-batch; progress is a display, not an invariant). Events
// that do not fit the job's plan (unknown job, a rank not held by the sender, stage or microbatch
// out of range, an older iteration) are dropped and counted, never fatal. Thread-safe.
//
// Iteration reports wait per iteration until every rank has reported it. After a coordinator
// restart the ranks' buffered reports arrive one worker's outbox after another, so one rank may be
// hundreds of iterations ahead of another for a moment: a half-reported iteration waits as long
// as a rank may still be on its way back (Options::keep_pending, the recovery grace), not a fixed
// count. A report of an iteration that can no longer complete (its other reports went to the
// previous coordinator and died with it) is still summarised, from the ranks that did report,
// once a later iteration completes: every iteration the job ran has a summary.
#ifndef ZPIPE_COORDINATOR_PROGRESS_TRACKER_H_
#define ZPIPE_COORDINATOR_PROGRESS_TRACKER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "core/placement.h"

namespace zpipe::coordinator {

// Values match v1::MicrobatchPhase.
enum class Phase : uint8_t { kNone = 0, kForward = 1, kBackward = 2, kDone = 3 };

struct RankProgressView {
  int pipeline_rank = 0;
  int data_rank = 0;
  std::string worker_name;
  int iteration = 0;
  int forward_done = 0, backward_done = 0, weight_done = 0;
  int per_iteration = 0;            // v * m: total of each of F, B, W per iteration
  std::vector<Phase> microbatches;  // chunk * m + microbatch; empty unless requested
  int iterations_done = 0;
};

struct JobProgressView {
  int iteration = 0;
  int iterations_total = 0;
  int iterations_done = 0;
  std::vector<RankProgressView> ranks;  // by global rank
};

// Columnar events from one ProgressBatch; all spans have equal length. Views of the message's
// own arrays (no copy at ingest rate), so `ops` holds the v1::ComputeOp values as they arrived,
// read as core::ActionKind through wire::ActionKindOf. Only compute kinds (F, B, W, BW) are
// progress; the send, receive and reduce events a batch may also carry are for the executed
// timeline (TraceStore) and skipped here, not dropped; unknown values are dropped.
struct ProgressEvents {
  absl::Span<const int32_t> iterations;
  absl::Span<const int32_t> ops;  // v1::ComputeOp values
  absl::Span<const int32_t> stages;
  absl::Span<const int32_t> microbatches;
};

class ProgressTracker {
 public:
  struct Options {
    // How long a half-reported iteration waits for its other ranks' reports, from its first
    // report (coordinator clock). The job manager derives it from --recovery-grace: a rank that
    // is away longer is a lost rank and the attempt is over anyway.
    absl::Duration keep_pending = absl::Seconds(60);
    // A memory bound beside the time bound: half-reported iterations kept per job at most.
    size_t max_pending = 1 << 14;
  };
  ProgressTracker() : ProgressTracker(Options()) {}
  explicit ProgressTracker(Options options) : options_(options) {}

  // Starts tracking a scheduled job (replacing any previous attempt's progress). `iterations_done`:
  // iterations already complete (a job reloaded after a coordinator restart), so progress resumes
  // there instead of at 0 and reports of earlier iterations are not summarised again.
  void StartJob(const std::string& job_id, const core::Placement& placement, int microbatches,
                int iterations, double predicted_bubble, const std::vector<RankSlot>& ranks,
                int iterations_done = 0);

  // Applies events from `worker_name` for rank (pipeline_rank, data_rank). Returns how many were
  // applied; the rest are dropped, except timeline-only events (sends, receives, reductions),
  // which are skipped without counting.
  int AddEvents(const std::string& job_id, const std::string& worker_name, int pipeline_rank,
                int data_rank, const ProgressEvents& events);

  // Records one rank's report of one iteration, arrived at `now`. Returns the job-wide summaries
  // this report completes, in iteration order: the iteration's own when every rank has reported
  // it, preceded by those of earlier iterations still half-reported (their other reports are lost;
  // the summary has the ranks that reported). Empty when nothing completed.
  // `repeated` (when given) says whether the report was one already taken: its iteration was
  // summarised, or this rank's report of it waits already (a worker sends its last reports again
  // after a reconnect, in case a coordinator that died had not stored them).
  std::vector<IterationSummary> AddReport(const std::string& job_id,
                                          const std::string& worker_name, int iteration,
                                          const RankStats& stats, std::optional<double> loss,
                                          std::optional<double> eval_loss, absl::Time now,
                                          bool* repeated = nullptr);

  // The plan's predicted bubble that later summaries carry (a re-plan switched plans).
  void SetPredictedBubble(const std::string& job_id, double predicted_bubble);
  // Drops the job's progress (a deleted job); later events for it are dropped as unknown.
  void Forget(const std::string& job_id);

  // nullopt for a job never started.
  std::optional<JobProgressView> Get(const std::string& job_id, bool with_microbatches) const;
  // Changes whenever the job's progress changes (cheap poll for WatchJob).
  uint64_t Version(const std::string& job_id) const;

  uint64_t dropped_events() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct RankState {
    absl::Mutex mu;  // serialises writers only
    RankSlot slot;   // immutable after StartJob
    std::atomic<int> iteration{0};
    std::atomic<int> f{0}, b{0}, w{0};
    std::atomic<int> iterations_done{0};
    std::unique_ptr<std::atomic<uint8_t>[]> phases;  // Phase values, v * m of them
    size_t num_phases = 0;
  };
  struct PendingIteration {
    absl::Time first_report;
    std::vector<std::optional<RankStats>> ranks;
    std::vector<double> losses;
    std::vector<double> eval_losses;
    int reported = 0;
  };
  struct Job {
    core::Placement placement;
    int m = 0;
    int iterations = 0;
    double predicted_bubble ABSL_GUARDED_BY(reports_mu) = 0;
    std::vector<std::unique_ptr<RankState>> ranks;  // by global rank
    std::atomic<uint64_t> version{0};
    mutable absl::Mutex reports_mu;
    std::map<int, PendingIteration> pending ABSL_GUARDED_BY(reports_mu);
    int iterations_done ABSL_GUARDED_BY(reports_mu) = 0;
  };

  std::shared_ptr<Job> Find(const std::string& job_id) const;
  // The summary of `iteration` from the ranks that reported it.
  static IterationSummary Summarise(int iteration, const PendingIteration& pending,
                                    double predicted_bubble);

  const Options options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_PROGRESS_TRACKER_H_
