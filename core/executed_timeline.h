// Executed timelines: what ranks actually did in one iteration, as timed actions on one clock.
// render/timeline.h draws them as SVG (through RenderSvg, so executed and predicted timelines look
// alike) and render/chrome_trace.h writes them as a Chrome trace.
//
// A timeline is the common currency between the coordinator's GetTrace, the client, the Chrome
// trace writer and the live page: rows (one per global rank), each with its
// actions and their start/end in seconds: compute (F, B, W, BW), sends and receives (post to
// completion; they take no rank time) and reductions, drawn on separate tracks.
#ifndef ZPIPE_CORE_EXECUTED_TIMELINE_H_
#define ZPIPE_CORE_EXECUTED_TIMELINE_H_

#include <string>
#include <vector>

#include "core/plan.h"
#include "core/simulator.h"

namespace zpipe::core {

struct TimedAction {
  Action action;
  double start = 0;  // seconds
  double end = 0;
};

struct RankTimeline {
  int pipeline_rank = 0;
  int data_rank = 0;
  std::string worker;  // who ran it; empty for a predicted timeline
  std::vector<TimedAction> actions;
};

struct ExecutedTimeline {
  std::string title;  // e.g. "job j1 iteration 3 (zb-v)"
  int iteration = 0;
  std::vector<RankTimeline> ranks;  // one row each, in display order
};

// The predicted timeline of `plan` under `sim` (times divided by `time_unit_per_second`, e.g.
// 1000 for a simulation in milliseconds), every action in plan order, shifted to start at 0.
// `sim` must come from Simulate(plan, ...).
ExecutedTimeline PredictedTimeline(const Plan& plan, const SimResult& sim,
                                   double time_unit_per_second = 1.0);

// A plan (one rank per row, actions sorted by start) and a SimResult holding the measured times,
// with span, busy, idle and bubble computed by docs/design.md's definitions: what render::RenderSvg
// and RenderAscii take.
struct TimelineAsPlan {
  Plan plan;
  SimResult sim;
};
TimelineAsPlan ToPlanAndTimes(const ExecutedTimeline& timeline);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_EXECUTED_TIMELINE_H_
