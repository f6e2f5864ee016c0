#include "coordinator/trace_proto.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/executed_timeline.h"
#include "google/protobuf/util/time_util.h"

namespace zpipe::coordinator {
namespace {

void ActionToProto(const core::TimedAction& a, double t0, v1::TracedAction* out) {
  out->set_kind(std::string(core::ActionKindName(a.action.kind)));
  out->set_stage(a.action.stage);
  out->set_microbatch(a.action.microbatch);
  out->set_peer(a.action.peer);
  out->set_chunk(a.action.chunk);
  out->set_bucket(a.action.bucket);
  out->set_start(a.start - t0);
  out->set_end(a.end - t0);
}

}  // namespace

void TraceToProto(const std::string& job_id, const TraceView& view, v1::GetTraceResponse* out) {
  const JobTrace& trace = view.trace;
  out->set_job_id(job_id);
  out->set_iteration(trace.iteration);
  out->set_complete(trace.complete);
  for (int it : trace.available_iterations) out->add_available_iterations(it);
  double t0 = std::numeric_limits<double>::infinity();
  for (const TracedRank& r : trace.ranks) {
    for (const core::TimedAction& a : r.actions) t0 = std::min(t0, a.start);
  }
  if (!std::isfinite(t0)) t0 = 0;
  const int64_t nanos = std::llround(t0 * 1e9);
  *out->mutable_start_time() = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(nanos);
  for (const TracedRank& r : trace.ranks) {
    v1::RankTrace* rank = out->add_ranks();
    rank->set_pipeline_rank(r.slot.pipeline_rank);
    rank->set_data_rank(r.slot.data_rank);
    rank->set_worker_name(r.slot.worker_name);
    rank->set_clock_offset(r.clock.offset_s);
    rank->set_clock_samples(r.clock.samples);
    for (const core::TimedAction& a : r.actions) ActionToProto(a, t0, rank->add_actions());
  }
  if (view.plan != nullptr) {
    out->set_schedule(view.plan->plan.schedule);
    // The planner simulates in milliseconds.
    const core::ExecutedTimeline predicted =
        core::PredictedTimeline(view.plan->plan, view.plan->sim, 1000.0);
    for (const core::RankTimeline& r : predicted.ranks) {
      v1::RankTrace* rank = out->add_predicted();
      rank->set_pipeline_rank(r.pipeline_rank);
      for (const core::TimedAction& a : r.actions) ActionToProto(a, 0, rank->add_actions());
    }
  }
}

}  // namespace zpipe::coordinator
