// RunMonitor: progress, executed timelines, iteration summaries and pipeline metrics.
#include "coordinator/run_monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/measured_bubble.h"
#include "util/log.h"
#include "wire/compute_op.h"

namespace zpipe::coordinator {
namespace {

// Event k of `batch` as a timeline action, or nullopt when it does not go on the timeline: an
// unknown op, or a send, receive or reduction without its peer / chunk / bucket (`with_extras`).
std::optional<core::Action> TimelineAction(const ProgressBatchData& batch, size_t k,
                                           bool with_extras) {
  std::optional<core::ActionKind> kind = wire::ActionKindOf(batch.events.ops[k]);
  if (!kind) return std::nullopt;
  if (*kind == core::ActionKind::kReduce) {
    if (!with_extras) return std::nullopt;
    return core::Action::Reduce(batch.chunks[k], batch.buckets[k]);
  }
  core::Action a;
  a.kind = *kind;
  a.stage = batch.events.stages[k];
  a.microbatch = batch.events.microbatches[k];
  if (core::IsComm(a.kind)) {
    if (!with_extras) return std::nullopt;
    a.peer = batch.peers[k];
  }
  return a;
}

}  // namespace

void RunMonitor::StartJob(const std::string& job_id, const JobSpec& spec, const JobPlan& plan,
                          const std::vector<RankSlot>& ranks, int iterations_done) {
  tracker_.StartJob(job_id, plan.plan.placement, spec.microbatches, spec.iterations,
                    plan.sim.bubble_rate, ranks, iterations_done);
  traces_.StartJob(job_id, plan.plan, ranks);
}

void RunMonitor::AddProgress(const std::string& worker_name, const ProgressBatchData& batch,
                             absl::Time now) {
  tracker_.AddEvents(batch.job_id, worker_name, batch.pipeline_rank, batch.data_rank, batch.events);
  const size_t n = batch.events.iterations.size();
  if (n == 0 || batch.start_times.size() != n || batch.end_times.size() != n ||
      batch.events.ops.size() != n || batch.events.stages.size() != n ||
      batch.events.microbatches.size() != n) {
    return;
  }
  // Sends, receives and reductions need their peer / chunk / bucket; without them (or with
  // malformed ones) only the batch's compute events go on the timeline.
  auto usable = [n](absl::Span<const int32_t> v) { return v.size() == n; };
  const bool with_extras = usable(batch.peers) && usable(batch.chunks) && usable(batch.buckets);
  std::vector<int32_t> iterations;
  std::vector<core::Action> actions;
  std::vector<double> starts, ends;
  iterations.reserve(n);
  actions.reserve(n);
  starts.reserve(n);
  ends.reserve(n);
  double last_end = batch.end_times[0];
  for (size_t k = 0; k < n; ++k) {
    // Every event ended before the batch left, whether or not it is kept.
    last_end = std::max(last_end, batch.end_times[k]);
    std::optional<core::Action> a = TimelineAction(batch, k, with_extras);
    if (!a) continue;
    iterations.push_back(batch.events.iterations[k]);
    actions.push_back(*a);
    starts.push_back(batch.start_times[k]);
    ends.push_back(batch.end_times[k]);
  }
  // The batch left the worker after its last action ended: a clock sample (TraceStore).
  traces_.ObserveClock(worker_name, now, last_end);
  traces_.AddActions(batch.job_id, worker_name, batch.pipeline_rank, batch.data_rank, iterations,
                     actions, starts, ends);
}

void RunMonitor::ObserveClock(const std::string& worker_name, absl::Time now,
                              double worker_time_s) {
  traces_.ObserveClock(worker_name, now, worker_time_s);
}

std::vector<IterationSummary> RunMonitor::AddReport(const std::string& job_id,
                                                    const std::string& worker_name, int iteration,
                                                    const RankStats& stats,
                                                    std::optional<double> loss,
                                                    std::optional<double> eval_loss,
                                                    absl::Time now, bool* repeated) {
  return tracker_.AddReport(job_id, worker_name, iteration, stats, loss, eval_loss, now, repeated);
}

std::optional<double> RunMonitor::ObserveIteration(const std::string& job_id, int iteration, const RankStats& stats,
                                  const std::optional<IterationSummary>& summary,
                                  const std::shared_ptr<const JobPlan>& plan) {
  metrics_.ObserveRankIteration(job_id, iteration, stats);
  if (!summary) return std::nullopt;
  std::optional<PredictedBubble> predicted;
  if (plan != nullptr) {
    absl::StatusOr<PredictedBubble> p = PredictBubbleAtMeasuredCosts(*plan, summary->ranks);
    if (p.ok()) {
      predicted = *std::move(p);
    } else {
      LogWarning("job ", job_id, ": no predicted bubble at measured costs: ", p.status().message());
    }
  }
  metrics_.ObserveJobIteration(job_id, *summary, predicted);
  if (!predicted) return std::nullopt;
  return predicted->job;
}

JobEvent RunMonitor::RecordSummary(JobRecord& job, IterationSummary summary, absl::Time now) {
  job.iterations_done = std::max(job.iterations_done, summary.iteration + 1);
  if (!job.attempts.empty() && job.attempts.back().start_iteration < 0) {
    JobAttemptRecord& attempt = job.attempts.back();
    attempt.start_iteration = summary.iteration;
    if (job.attempts.size() > 1) {
      const int before = job.attempts[job.attempts.size() - 2].iterations_done;
      job.reason =
          absl::StrCat("attempt ", attempt.attempt, " resumed at iteration ", summary.iteration,
                       " (", std::max(0, before - summary.iteration), " iterations run again)");
      LogInfo("job ", job.id, ": ", job.reason);
    }
  }
  JobEvent event;
  event.sequence = ++job.last_sequence;
  event.time = now;
  event.kind = JobEvent::Kind::kIteration;
  event.summary = summary;
  job.latest_summary = std::move(summary);
  return event;
}

std::string RunMonitor::IterationLogLine(const IterationSummary& s) {
  double tokens = 0;
  for (const RankStats& r : s.ranks) tokens += r.tokens;
  std::string line = absl::StrCat("iteration ", s.iteration, ":");
  if (s.loss) absl::StrAppend(&line, absl::StrFormat(" loss %.4f,", *s.loss));
  if (s.eval_loss) absl::StrAppend(&line, absl::StrFormat(" eval loss %.4f,", *s.eval_loss));
  if (s.duration_s > 0 && tokens > 0) {
    absl::StrAppend(&line, absl::StrFormat(" %.0f tokens/s,", tokens / s.duration_s));
  }
  absl::StrAppend(&line, absl::StrFormat(" bubble %.1f%%", 100 * s.bubble_rate));
  if (s.predicted_bubble_measured_costs) {
    absl::StrAppend(&line, absl::StrFormat(" (predicted %.1f%% at measured costs, planned %.1f%%)",
                                           100 * *s.predicted_bubble_measured_costs,
                                           100 * s.predicted_bubble_rate));
  } else {
    absl::StrAppend(&line, absl::StrFormat(" (predicted %.1f%%)", 100 * s.predicted_bubble_rate));
  }
  return line;
}

}  // namespace zpipe::coordinator
