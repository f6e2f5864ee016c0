// The timeline files `zpipe run` writes after a job: the executed timeline of one iteration (the
// latest one every rank completed) as a Chrome trace (Trace Event Format JSON, loads in Perfetto)
// and as an SVG, named STEM.trace.json and STEM.timeline.svg in `dir`; beside them STEM.plan.txt,
// the plan the job ran (one action per line, core::ParsePlanText reads it back).
#ifndef ZPIPE_CLIENT_RUN_TIMELINE_H_
#define ZPIPE_CLIENT_RUN_TIMELINE_H_

#include <optional>
#include <string>

#include "client/bubble_attribution.h"
#include "client/client.h"
#include "client/reduce_exposure.h"

namespace zpipe::cli {

struct TimelineFiles {
  int iteration = -1;  // 0-based; -1 when nothing was written
  std::string chrome;  // paths; empty when not written
  std::string svg;
  std::string plan;   // STEM.plan.txt: the plan the job ran (core's text form)
  std::string error;  // why not, for the summary
  // The traced iteration's exposed reduce time and how much of it waited for a slower replica;
  // unset when the trace holds no reductions (d = 1).
  std::optional<ReduceExposure> exposure;
  // The traced iteration's bubble split into the plan's, the actions' and the runtime's share;
  // unset when the trace or the plan could not be had or do not match (why: bubble_error).
  std::optional<BubbleAttribution> bubble;
  std::string bubble_error;
};

// Fetches the trace of job `job_id` from the coordinator and writes both files (creating `dir`).
// Never fails the run: problems end up in TimelineFiles::error.
TimelineFiles WriteTimelineFiles(Client& client, const std::string& job_id, const std::string& dir,
                                 const std::string& stem);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_RUN_TIMELINE_H_
