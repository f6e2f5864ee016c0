// Timeline rendering of a simulated (or executed) plan: ASCII rows like the papers' figures, and
// SVG with coloured F/B/W blocks on a time axis, a legend, and the bubble rate in the title.
#ifndef ZPIPE_CORE_TIMELINE_H_
#define ZPIPE_CORE_TIMELINE_H_

#include <string>

#include "core/plan.h"
#include "core/simulator.h"

namespace zpipe::core {

struct AsciiOptions {
  // Characters per row of the time axis; each action gets at least one cell.
  int width = 120;
};

// One row per rank. Each compute action is drawn as its kind letter (F, B, W; BW as 'X'), with
// the microbatch number in the first cell(s) when it fits; idle time is '.'.
std::string RenderAscii(const Plan& plan, const SimResult& sim, const AsciiOptions& options = {});

struct SvgOptions {
  std::string title;  // the bubble rate is appended
  int width = 1200;
  int row_height = 28;
};

std::string RenderSvg(const Plan& plan, const SimResult& sim, const SvgOptions& options = {});

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_TIMELINE_H_
