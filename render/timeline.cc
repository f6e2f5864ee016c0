#include "render/timeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/number_format.h"

namespace zpipe::render {

using core::Action;
using core::ActionKind;
using core::ActionTiming;
using core::ActionToString;
using core::ExecutedTimeline;
using core::IsComm;
using core::IsCompute;
using core::IsRecv;
using core::IsSend;
using core::PlainNumber;
using core::Plan;
using core::SimResult;
using core::TimelineAsPlan;
using core::ToPlanAndTimes;

namespace {

char KindChar(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return 'F';
    case ActionKind::kBackwardInput:
      return 'B';
    case ActionKind::kBackwardWeight:
      return 'W';
    case ActionKind::kBackwardFull:
      return 'X';
    case ActionKind::kReduce:
      return 'R';
    case ActionKind::kRecompute:
      return 'C';  // 'R' is a reduction's; lowercase, a later chunk's
    default:
      return '?';
  }
}

const char* KindColor(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "#4e79a7";
    case ActionKind::kBackwardInput:
      return "#59a14f";
    case ActionKind::kBackwardWeight:
      return "#f28e2b";
    case ActionKind::kBackwardFull:
      return "#b07aa1";
    case ActionKind::kReduce:
      return "#e15759";
    case ActionKind::kSendAct:
    case ActionKind::kSendGrad:
      return "#9c755f";
    case ActionKind::kRecvAct:
    case ActionKind::kRecvGrad:
      return "#bab0ac";
    case ActionKind::kRecompute:
      return "#edc948";
  }
  return "#999999";
}

std::string XmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The drawn extent: from the first start of any action (a receive posted before the first
// compute action included; a simulated plan posts none earlier) to the last end of any. It is
// the global makespan, longer than the span when the ranks' busy windows are staggered, so every
// block fits.
struct Extent {
  double first = 0;
  double length = 0;
};

Extent DrawnExtent(const Plan& plan, const SimResult& sim) {
  double first = INFINITY, last = -INFINITY;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      first = std::min(first, sim.timings[r][k].start);
      last = std::max(last, sim.timings[r][k].end);
    }
  }
  if (!std::isfinite(first)) return {};
  return {first, std::max(last - first, 0.0)};
}

// The chunk (on its rank) an action works on; 0 for a plan without a placement to ask.
int ChunkOf(const Plan& plan, const Action& a) {
  if (a.kind == ActionKind::kReduce) return a.chunk;
  if (a.stage < 0 || a.stage >= plan.num_stages()) return 0;
  return plan.placement.ChunkOf(a.stage);
}

// The ASCII label of a compute action on `plan`: its kind letter, lowercase for the second and
// later chunks of a rank, and its microbatch, e.g. "W12" or "f3".
std::string AsciiLabel(const Plan& plan, const Action& a) {
  char letter = KindChar(a.kind);
  if (ChunkOf(plan, a) > 0) letter = static_cast<char>(std::tolower(letter));
  return absl::StrCat(std::string(1, letter), a.microbatch);
}

// Cells per time unit with which every compute action of positive duration gets a cell per
// character of its label (floor(end * scale) - floor(start * scale) >= label length whenever
// duration * scale >= label length).
double LabelScale(const Plan& plan, const SimResult& sim) {
  double scale = 0;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      const Action& a = plan.ranks[r][k];
      const double d = sim.timings[r][k].end - sim.timings[r][k].start;
      if (!IsCompute(a.kind) || d <= 0) continue;
      scale = std::max(scale, AsciiLabel(plan, a).size() / d);
    }
  }
  return scale * (1 + 1e-9);
}

// `hex` ("#rrggbb") moved `fraction` of the way to white: the second and later chunks of a rank
// are drawn in lighter shades of their kind's colour.
std::string Lighten(absl::string_view hex, double fraction) {
  if (fraction <= 0 || hex.size() != 7) return std::string(hex);
  std::string out = "#";
  for (int i = 0; i < 3; ++i) {
    const int c = std::stoi(std::string(hex.substr(1 + 2 * i, 2)), nullptr, 16);
    absl::StrAppendFormat(&out, "%02x", static_cast<int>(std::lround(c + (255 - c) * fraction)));
  }
  return out;
}

// How much lighter chunk `chunk` of `chunks` is drawn: none for the first, up to 0.5 for the last.
double ChunkShade(int chunk, int chunks) { return chunks > 1 ? 0.5 * chunk / (chunks - 1) : 0; }

bool HasRecompute(const Plan& plan) {
  for (const auto& rank : plan.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kRecompute) return true;
    }
  }
  return false;
}

bool HasComm(const Plan& plan) {
  for (const auto& rank : plan.ranks) {
    for (const Action& a : rank) {
      if (IsComm(a.kind)) return true;
    }
  }
  return false;
}

// A "nice" tick step giving about `target` ticks over `span`.
double TickStep(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= f * mag) return f * mag;
  }
  return 10 * mag;
}

// Where RenderSvg draws: margins, the rows of each rank's lane, and the time scale.
struct SvgLayout {
  static constexpr int kLeft = 60, kRight = 20, kTop = 50, kAxis = 30, kLegend = 30;
  int width = 0;
  int row_h = 0;      // a compute row
  int reduce_h = 0;   // a SEND, RECV or REDUCE track
  bool comm = false;  // the plan communicates: SEND and RECV tracks
  bool recompute = false;  // the plan has R actions (the legend names them)
  // Offsets in a rank's lane: the compute row at 0, then the tracks.
  int send_y = 0, recv_y = 0, reduce_y = 0;
  int lane = 0;  // a rank's lane, tracks and gap included
  int height = 0;
  double t0 = 0, length = 0;  // the drawn extent
  double sx = 0;              // pixels per time unit
  int chunks = 1;

  double X(double t) const { return kLeft + (t - t0) * sx; }
};

// Per rank: the compute row, then (when the plan communicates) a SEND and a RECV track, then
// the REDUCE track. Sends and receives in flight at once overlap on their track (translucent).
SvgLayout LayOutSvg(const Plan& plan, const SimResult& sim, const SvgOptions& options) {
  SvgLayout l;
  l.width = std::max(300, options.width);
  l.row_h = std::max(12, options.row_height);
  l.reduce_h = std::max(4, l.row_h / 5);
  l.comm = HasComm(plan);
  l.recompute = HasRecompute(plan);
  l.send_y = l.row_h + 2;
  l.recv_y = l.send_y + l.reduce_h + 1;
  l.reduce_y = l.comm ? l.recv_y + l.reduce_h + 1 : l.row_h + 2;
  l.lane = l.reduce_y + l.reduce_h + 4;
  l.height = SvgLayout::kTop + plan.num_ranks() * l.lane + SvgLayout::kAxis + SvgLayout::kLegend;
  const Extent extent = DrawnExtent(plan, sim);
  l.t0 = extent.first;
  l.length = std::max(extent.length, 1e-12);
  l.sx = (l.width - SvgLayout::kLeft - SvgLayout::kRight) / l.length;
  l.chunks = plan.placement.chunks_per_rank();
  return l;
}

// Rank r's label, background and track names, then one box per action.
void DrawRankLane(const Plan& plan, const SimResult& sim, const SvgLayout& l, int r,
                  std::string& out) {
  const int left = SvgLayout::kLeft;
  const int y = SvgLayout::kTop + r * l.lane;
  absl::StrAppendFormat(&out,
                        "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">rank %d</text>\n"
                        "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#eeeeee\"/>\n",
                        left - 6, y + l.row_h / 2 + 4, r, left, y, l.length * l.sx, l.row_h);
  if (l.comm) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"6\">send"
                          "</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
                          "font-size=\"6\">recv</text><text x=\"%d\" y=\"%d\" "
                          "text-anchor=\"end\" font-size=\"6\">reduce</text>\n",
                          left - 6, y + l.send_y + l.reduce_h, left - 6, y + l.recv_y + l.reduce_h,
                          left - 6, y + l.reduce_y + l.reduce_h);
  }
  const auto& actions = plan.ranks[r];
  for (size_t k = 0; k < actions.size(); ++k) {
    const Action& a = actions[k];
    const bool reduce = a.kind == ActionKind::kReduce;
    const bool send = IsSend(a.kind), recv = IsRecv(a.kind);
    const ActionTiming& t = sim.timings[r][k];
    const double x = l.X(t.start);
    const double w = std::max(0.5, (t.end - t.start) * l.sx);
    const int ry = y + (reduce ? l.reduce_y : send ? l.send_y : recv ? l.recv_y : 0);
    const int rh = reduce || send || recv ? l.reduce_h : l.row_h;
    absl::StrAppendFormat(
        &out,
        "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"%s "
        "stroke=\"white\" stroke-width=\"0.5\"><title>%s [%g, %g]</title></rect>\n",
        x, ry, w, rh, Lighten(KindColor(a.kind), ChunkShade(ChunkOf(plan, a), l.chunks)),
        send || recv ? " fill-opacity=\"0.6\"" : "", XmlEscape(ActionToString(a)), t.start, t.end);
    if (IsCompute(a.kind) && w >= 14) {
      absl::StrAppendFormat(&out,
                            "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"white\" "
                            "font-size=\"9\">%d</text>\n",
                            x + w / 2, y + l.row_h / 2 + 3, a.microbatch);
    }
  }
}

// The time axis at `axis_y`, with about ten ticks.
void DrawTimeAxis(const SvgLayout& l, int axis_y, std::string& out) {
  const int left = SvgLayout::kLeft;
  absl::StrAppendFormat(&out,
                        "<line x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>\n",
                        left, axis_y, left + l.length * l.sx, axis_y);
  const double step = TickStep(l.length, 10);
  for (double t = 0; t <= l.length + 1e-9; t += step) {
    const double x = left + t * l.sx;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>"
                          "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                          x, axis_y, x, axis_y + 4, x, axis_y + 16, t);
  }
}

// The legend on the line at `ly`: each kind drawn, and the shading of later chunks.
void DrawLegend(const SvgLayout& l, int ly, std::string& out) {
  int lx = SvgLayout::kLeft;
  std::vector<ActionKind> kinds = {ActionKind::kForward, ActionKind::kBackwardInput,
                                   ActionKind::kBackwardWeight, ActionKind::kBackwardFull};
  if (l.comm) kinds.insert(kinds.end(), {ActionKind::kSendAct, ActionKind::kRecvAct});
  kinds.push_back(ActionKind::kReduce);
  if (l.recompute) kinds.push_back(ActionKind::kRecompute);
  for (ActionKind kind : kinds) {
    const char* name = kind == ActionKind::kForward          ? "F forward"
                       : kind == ActionKind::kBackwardInput  ? "B input grad"
                       : kind == ActionKind::kBackwardWeight ? "W weight grad"
                       : kind == ActionKind::kBackwardFull   ? "BW full backward"
                       : kind == ActionKind::kSendAct        ? "send"
                       : kind == ActionKind::kRecvAct        ? "recv"
                       : kind == ActionKind::kRecompute      ? "R recompute"
                                                             : "reduce";
    absl::StrAppendFormat(&out,
                          "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"%d\">%s</text>\n",
                          lx, ly - 10, KindColor(kind), lx + 16, ly, name);
    lx += 130;
  }
  if (l.chunks > 1) {
    absl::StrAppendFormat(&out,
                          "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"%d\">%s</text>\n",
                          lx, ly - 10, Lighten(KindColor(ActionKind::kForward), ChunkShade(1, 2)),
                          lx + 16, ly,
                          l.chunks == 2 ? "lighter: chunk 1" : "lighter: later chunks");
  }
}

}  // namespace

std::string RenderAscii(const Plan& plan, const SimResult& sim, const AsciiOptions& options) {
  const Extent extent = DrawnExtent(plan, sim);
  const double length = std::max(extent.length, 1e-12);
  int width = options.width;
  if (width <= 0) {
    const double wanted = std::ceil(extent.length * LabelScale(plan, sim));
    width = static_cast<int>(std::min<double>(wanted, kMaxAsciiWidth));
  }
  width = std::clamp(width, kMinAsciiWidth, kMaxAsciiWidth);
  const double scale = width / length;
  bool any_reduce = false;
  std::string out = absl::StrFormat("%s: p=%d m=%d span=%s makespan=%s bubble=%.4f\n",
                                    plan.schedule.empty() ? "plan" : plan.schedule,
                                    plan.num_ranks(), plan.num_microbatches, PlainNumber(sim.span),
                                    PlainNumber(sim.global_makespan), sim.bubble_rate);
  for (int r = 0; r < plan.num_ranks(); ++r) {
    std::string row(width, '.');
    std::string reduce_row(width, ' ');
    const auto& actions = plan.ranks[r];
    for (size_t k = 0; k < actions.size(); ++k) {
      const Action& a = actions[k];
      if (IsComm(a.kind)) continue;
      const ActionTiming& t = sim.timings[r][k];
      int lo = static_cast<int>(std::floor((t.start - extent.first) * scale + 1e-9));
      int hi = static_cast<int>(std::floor((t.end - extent.first) * scale + 1e-9));
      lo = std::clamp(lo, 0, width - 1);
      hi = std::clamp(std::max(hi, lo + 1), lo + 1, width);
      if (a.kind == ActionKind::kReduce) {
        any_reduce = true;
        for (int c = lo; c < hi; ++c) reduce_row[c] = 'R';
        continue;
      }
      // The whole label when it fits, else the kind letter alone (never a cut number).
      const std::string label = AsciiLabel(plan, a);
      const bool fits = hi - lo >= static_cast<int>(label.size());
      for (int c = lo; c < hi; ++c) {
        const size_t off = c - lo;
        row[c] = fits && off < label.size() ? label[off] : off == 0 ? label[0] : ' ';
      }
    }
    absl::StrAppendFormat(&out, "r%-3d|%s| bubble %.3f\n", r, row, sim.rank_bubble[r]);
    if (any_reduce) absl::StrAppendFormat(&out, "    |%s| reduce\n", reduce_row);
  }
  absl::StrAppend(&out,
                  "legend: F forward, B input backward, W weight backward, X fused "
                  "backward (BW), R reduce, . idle; number = microbatch",
                  HasRecompute(plan) ? "; C recompute (the plan's R)" : "",
                  plan.placement.chunks_per_rank() > 1 ? "; lowercase = a rank's later chunk" : "",
                  "\n");
  return out;
}

std::string RenderSvg(const Plan& plan, const SimResult& sim, const SvgOptions& options) {
  const SvgLayout l = LayOutSvg(plan, sim, options);
  const std::string title = absl::StrFormat(
      "%s — bubble rate %.2f%%",
      options.title.empty() ? (plan.schedule.empty() ? "plan" : plan.schedule) : options.title,
      100 * sim.bubble_rate);
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<title>%s</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
      l.width, l.height, l.width, l.height, XmlEscape(title), SvgLayout::kLeft, XmlEscape(title));
  for (int r = 0; r < plan.num_ranks(); ++r) DrawRankLane(plan, sim, l, r, out);
  const int axis_y = SvgLayout::kTop + plan.num_ranks() * l.lane + 4;
  DrawTimeAxis(l, axis_y, out);
  DrawLegend(l, axis_y + SvgLayout::kAxis, out);
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

std::string RenderTimelineSvg(const ExecutedTimeline& timeline, SvgOptions options) {
  if (options.title.empty()) options.title = timeline.title.empty() ? "timeline" : timeline.title;
  const TimelineAsPlan p = ToPlanAndTimes(timeline);
  return RenderSvg(p.plan, p.sim, options);
}

}  // namespace zpipe::render
