// Chrome trace export: an executed (and optionally the predicted) timeline as Trace Event Format
// JSON, which loads in Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// Layout: one process per rank ("rank 1 (dp 0) worker-a"), and within it one thread (track) per
// kind of work: F, B (B and BW), W, SEND (SEND_ACT/SEND_GRAD), RECV (RECV_ACT/RECV_GRAD), REDUCE.
// Every action is one complete event ("ph":"X") named by its text form ("F s3 mb7"), with
// microseconds for ts/dur as the format requires, and args {kind, stage, microbatch, iteration,
// ...}. Events of one track that overlap in time (sends or receives in flight together; a
// receive runs from its post to the data's arrival) spill into extra lanes "RECV 2", "RECV 3", ...
// (tid = track * 100 + k) right below the track, since complete events on one thread must nest. The
// predicted timeline, when given, follows as processes "predicted rank R", sorted after the
// executed ones, on the same time origin (both start at 0 at their first action). The document is
// written with nlohmann-json, on one line.
#ifndef ZPIPE_RENDER_CHROME_TRACE_H_
#define ZPIPE_RENDER_CHROME_TRACE_H_

#include <string>

#include "core/executed_timeline.h"

namespace zpipe::render {

struct ChromeTraceOptions {
  const core::ExecutedTimeline* predicted = nullptr;  // optional; not owned
  // Shift every timeline so that its first action starts at 0 (the executed times are absolute
  // epoch seconds otherwise, which Perfetto shows as huge offsets).
  bool rebase = true;
};

// Track (thread id of its first lane) of an action kind within its rank's process, 1..6 as listed
// above.
int ChromeTrackOf(core::ActionKind kind);

std::string ChromeTraceJson(const core::ExecutedTimeline& executed,
                            const ChromeTraceOptions& options = {});

}  // namespace zpipe::render

#endif  // ZPIPE_RENDER_CHROME_TRACE_H_
