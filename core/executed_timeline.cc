#include "core/executed_timeline.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zpipe::core {

ExecutedTimeline PredictedTimeline(const Plan& plan, const SimResult& sim,
                                   double time_unit_per_second) {
  ExecutedTimeline out;
  out.title = plan.schedule.empty() ? "predicted" : plan.schedule + " (predicted)";
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& rank : sim.timings) {
    for (const ActionTiming& t : rank) t0 = std::min(t0, t.start);
  }
  if (!std::isfinite(t0)) t0 = 0;
  const double scale = time_unit_per_second > 0 ? 1.0 / time_unit_per_second : 1.0;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    RankTimeline row;
    row.pipeline_rank = static_cast<int>(r);
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      const ActionTiming& t =
          r < sim.timings.size() && k < sim.timings[r].size() ? sim.timings[r][k] : ActionTiming{};
      row.actions.push_back({plan.ranks[r][k], (t.start - t0) * scale, (t.end - t0) * scale});
    }
    out.ranks.push_back(std::move(row));
  }
  return out;
}

TimelineAsPlan ToPlanAndTimes(const ExecutedTimeline& timeline) {
  const int rows = std::max<int>(1, static_cast<int>(timeline.ranks.size()));
  TimelineAsPlan out;
  out.plan = EmptyPlan(timeline.title, Placement::Linear(rows), 0);
  SimResult& sim = out.sim;
  sim.timings.resize(rows);
  sim.busy.assign(rows, 0);
  sim.idle.assign(rows, 0);
  sim.rank_bubble.assign(rows, 0);
  sim.reduce_total.assign(rows, 0);
  sim.reduce_exposed.assign(rows, 0);
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  double span = 0;
  int max_mb = -1;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    std::vector<TimedAction> actions = timeline.ranks[r].actions;
    std::stable_sort(actions.begin(), actions.end(),
                     [](const TimedAction& a, const TimedAction& b) { return a.start < b.start; });
    double rank_first = std::numeric_limits<double>::infinity();
    double rank_last = -std::numeric_limits<double>::infinity();
    for (const TimedAction& a : actions) {
      out.plan.ranks[r].push_back(a.action);
      sim.timings[r].push_back({a.start, a.end});
      if (IsCompute(a.action.kind)) {
        sim.busy[r] += a.end - a.start;
        max_mb = std::max(max_mb, a.action.microbatch);
      }
      if (a.action.kind == ActionKind::kReduce) sim.reduce_total[r] += a.end - a.start;
      // Sends and receives occupy no rank time (not in the span) but are drawn.
      first = std::min(first, a.start);
      last = std::max(last, a.end);
      if (!IsComm(a.action.kind)) {
        rank_first = std::min(rank_first, a.start);
        rank_last = std::max(rank_last, a.end);
      }
    }
    if (std::isfinite(rank_first)) span = std::max(span, rank_last - rank_first);
  }
  out.plan.num_microbatches = max_mb + 1;
  // The global makespan spans every action drawn (posted receives included); the bubble uses
  // docs/design.md's span (longest single rank, compute and reductions).
  sim.span = span;
  sim.global_makespan = std::isfinite(first) ? last - first : 0;
  double busy = 0;
  for (int r = 0; r < rows; ++r) {
    busy += sim.busy[r];
    sim.idle[r] = std::max(0.0, span - sim.busy[r]);
    sim.rank_bubble[r] = span > 0 ? 1 - sim.busy[r] / span : 0;
    sim.total_reduce += sim.reduce_total[r];
  }
  sim.bubble_rate = span > 0 ? 1 - busy / (rows * span) : 0;
  return out;
}

}  // namespace zpipe::core
