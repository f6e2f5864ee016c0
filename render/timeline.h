// Timeline rendering of a simulated (or executed) plan: ASCII rows like the papers' figures, and
// SVG with coloured F/B/W blocks on a time axis, a legend, and the bubble rate in the title.
#ifndef ZPIPE_RENDER_TIMELINE_H_
#define ZPIPE_RENDER_TIMELINE_H_

#include <string>

#include "core/executed_timeline.h"
#include "core/plan.h"
#include "core/simulator.h"

namespace zpipe::render {

// Bounds of AsciiOptions::width, in characters per row.
inline constexpr int kMinAsciiWidth = 10;
inline constexpr int kMaxAsciiWidth = 10000;

struct AsciiOptions {
  // Characters per row of the time axis; each action gets at least one cell. 0 = wide enough
  // that every compute action shows its whole label (at most kMaxAsciiWidth).
  int width = 0;
};

// One row per rank, over the drawn extent (first start to last end of any action, the global
// makespan), so nothing is cut. Each compute action is drawn as its kind letter (F, B, W; BW as
// 'X'; lowercase for a rank's second and later chunks) followed by its microbatch number when the
// whole label fits in its cells, else the letter alone; idle time is '.'. The header gives the span
// and the global makespan.
std::string RenderAscii(const core::Plan& plan, const core::SimResult& sim,
                        const AsciiOptions& options = {});

struct SvgOptions {
  std::string title;  // the bubble rate is appended
  int width = 1200;
  int row_height = 28;
};

// Blocks on a time axis over the drawn extent (every action fits, also the W that end after the
// span); the second and later chunks of a rank are lighter shades of their kind's colour.
std::string RenderSvg(const core::Plan& plan, const core::SimResult& sim,
                      const SvgOptions& options = {});

// SVG of an executed (or predicted) timeline (RenderSvg over core::ToPlanAndTimes);
// `options.title` defaults to the timeline's title.
std::string RenderTimelineSvg(const core::ExecutedTimeline& timeline, SvgOptions options = {});

}  // namespace zpipe::render

#endif  // ZPIPE_RENDER_TIMELINE_H_
