#include "render/timeline.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/grad_sync.h"
#include "core/schedule.h"
#include "render/plan_export.h"

namespace zpipe::render {
namespace {

using core::Action;
using core::ActionKind;
using core::ActionKindName;
using core::CostModel;
using core::GenerateSchedule;
using core::PlacementFor;
using core::Plan;
using core::ScheduleKind;
using core::ScheduleName;
using core::ScheduleRequest;
using core::SimResult;
using core::Simulate;
using core::StageCost;

struct Fixture {
  Plan plan;
  SimResult sim;
};

Fixture OneF1B(int p, int m) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = CostModel::Uniform(p, StageCost{.f = 1, .b = 1, .w = 1});
  Fixture f{*GenerateSchedule(ScheduleKind::k1F1B, req), {}};
  f.sim = *Simulate(f.plan, req.cost);
  return f;
}

TEST(TimelineTest, AsciiShowsOneRowPerRankWithIdleAndLabels) {
  // 1F1B p=2 m=2, width = makespan in units (F=1, BW=2): 9 time units.
  Fixture f = OneF1B(2, 2);
  ASSERT_DOUBLE_EQ(f.sim.span, 9);
  const std::string text = RenderAscii(f.plan, f.sim, {.width = 18});
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_GE(lines.size(), 4u);
  EXPECT_NE(lines[0].find("bubble=0.3333"), std::string::npos) << text;
  // Rank 0: F0 F1, idle while rank 1 works, BW0 ..., rank 1 starts idle.
  EXPECT_EQ(lines[1].substr(0, 7), "r0  |F0") << text;
  EXPECT_EQ(lines[2].substr(0, 7), "r1  |..") << text;
  EXPECT_NE(lines[2].find("X0"), std::string::npos) << text;
  EXPECT_NE(text.find("legend"), std::string::npos);
}

TEST(TimelineTest, SvgHasBlocksLegendAndBubbleInTitle) {
  Fixture f = OneF1B(4, 8);
  const std::string svg = RenderSvg(f.plan, f.sim, {.title = "1F1B"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("1F1B — bubble rate 27.27%"), std::string::npos);
  size_t rects = 0;
  for (size_t pos = 0; (pos = svg.find("<title>F s", pos)) != std::string::npos; ++pos) ++rects;
  EXPECT_EQ(rects, 32u);  // one block per F
  EXPECT_NE(svg.find("W weight grad"), std::string::npos);
}

Fixture Generated(ScheduleKind kind, int p, int m) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = CostModel::Uniform(PlacementFor(kind, p).num_stages(),
                                StageCost{.f = 1, .b = 1, .w = 1, .mem_b = -0.5, .mem_w = -0.5});
  Fixture f{*GenerateSchedule(kind, req), {}};
  f.sim = *Simulate(f.plan, req.cost);
  return f;
}

// The blocks (x, width, fill) of the compute actions of `svg`, by their "F s3 mb7" title.
struct SvgBlock {
  double x = 0, width = 0;
  std::string fill;
};
std::map<std::string, SvgBlock> ComputeBlocks(const std::string& svg) {
  std::map<std::string, SvgBlock> out;
  for (absl::string_view line : absl::StrSplit(svg, '\n')) {
    double x = 0, w = 0;
    char fill[16] = {0}, title[64] = {0};
    const std::string l(line);
    if (std::sscanf(l.c_str(),
                    "<rect x=\"%lf\" y=\"%*d\" width=\"%lf\" height=\"%*d\" fill=\"%15[^\"]\" "
                    "stroke=\"white\" stroke-width=\"0.5\"><title>%63[^[]",
                    &x, &w, fill, title) == 4) {
      std::string t(title);
      t.pop_back();  // the space before "[start, end]"
      out[t] = {x, w, fill};
    }
  }
  return out;
}

// Issue 15: ZB-V p=4 ends W blocks after the span (48; the last W ends at 51); they were drawn
// off the canvas. Every block must now lie inside the drawing area.
TEST(TimelineTest, SvgDrawsBlocksThatEndAfterTheSpan) {
  Fixture f = Generated(ScheduleKind::kZbV, 4, 8);
  ASSERT_DOUBLE_EQ(f.sim.span, 48);
  ASSERT_GT(f.sim.global_makespan, f.sim.span);
  const SvgOptions options;
  const std::string svg = RenderSvg(f.plan, f.sim, options);
  const std::map<std::string, SvgBlock> blocks = ComputeBlocks(svg);
  ASSERT_EQ(blocks.size(), f.plan.num_actions());
  double right_edge = 0;
  for (const auto& [title, b] : blocks) {
    EXPECT_GE(b.x, 60 - 1e-6) << title;
    right_edge = std::max(right_edge, b.x + b.width);
  }
  EXPECT_LE(right_edge, options.width - 20 + 1e-6);  // the right margin
  EXPECT_GE(right_edge, options.width - 20 - 1e-6);  // the last block ends at the edge
}

// The second chunk of a V schedule is a lighter shade of its kind's colour.
TEST(TimelineTest, SvgShadesTheSecondChunk) {
  Fixture f = Generated(ScheduleKind::kZbV, 4, 8);
  const std::map<std::string, SvgBlock> blocks = ComputeBlocks(RenderSvg(f.plan, f.sim));
  // Rank 0 holds stages 0 (chunk 0) and 7 (chunk 1).
  for (const char* kind : {"F", "B", "W"}) {
    const std::string first = absl::StrCat(kind, " s0 mb3"), second = absl::StrCat(kind, " s7 mb3");
    ASSERT_TRUE(blocks.count(first) && blocks.count(second)) << kind;
    EXPECT_NE(blocks.at(first).fill, blocks.at(second).fill) << kind;
    // Lighter: every channel at least as high, the sum higher.
    int sum0 = 0, sum1 = 0;
    for (int i = 0; i < 3; ++i) {
      const int c0 = std::stoi(blocks.at(first).fill.substr(1 + 2 * i, 2), nullptr, 16);
      const int c1 = std::stoi(blocks.at(second).fill.substr(1 + 2 * i, 2), nullptr, 16);
      EXPECT_GE(c1, c0) << kind;
      sum0 += c0;
      sum1 += c1;
    }
    EXPECT_GT(sum1, sum0) << kind;
  }
  // A one-chunk schedule has one colour per kind.
  Fixture g = OneF1B(4, 8);
  const std::map<std::string, SvgBlock> one = ComputeBlocks(RenderSvg(g.plan, g.sim));
  EXPECT_EQ(one.at("F s0 mb0").fill, one.at("F s3 mb7").fill);
}

// Issue 15: at p = 8 the ASCII view lost microbatch numbers ("FX": a cut "F10" beside an "X")
// and cut the last cell. By default every compute action shows its whole label, and every row
// ends with its last action.
TEST(TimelineTest, AsciiKeepsEveryLabelAtPipelineEight) {
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZbV}) {
    Fixture f = Generated(kind, 8, 16);
    const std::string text = RenderAscii(f.plan, f.sim);
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    ASSERT_GE(lines.size(), 9u) << text;
    for (int r = 0; r < 8; ++r) {
      const std::string& line = lines[1 + r];
      const size_t open = line.find('|'), close = line.rfind('|');
      ASSERT_NE(open, close) << line;
      const std::string row = line.substr(open + 1, close - open - 1);
      // The labels drawn, in time order, are the rank's compute actions in plan order.
      std::vector<std::string> drawn;
      for (size_t i = 0; i < row.size();) {
        if (std::isalpha(static_cast<unsigned char>(row[i]))) {
          size_t j = i + 1;
          while (j < row.size() && std::isdigit(static_cast<unsigned char>(row[j]))) ++j;
          drawn.push_back(row.substr(i, j - i));
          i = j;
        } else {
          ++i;
        }
      }
      std::vector<std::string> expected;
      for (const Action& a : f.plan.ranks[r]) {
        std::string letter =
            a.kind == ActionKind::kBackwardFull ? "X" : std::string(ActionKindName(a.kind));
        if (f.plan.placement.ChunkOf(a.stage) > 0) letter[0] = std::tolower(letter[0]);
        expected.push_back(absl::StrCat(letter, a.microbatch));
      }
      EXPECT_EQ(drawn, expected) << ScheduleName(kind) << " rank " << r << "\n" << text;
    }
  }
}

TEST(TimelineTest, JsonAndCsvExports) {
  Fixture f = OneF1B(2, 2);
  const std::string json = PlanToJson(f.plan, &f.sim);
  EXPECT_NE(json.find("\"span\":9,\"makespan\":9"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_memory\":[2,1]"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"kind\":\"BW\",\"stage\":1,\"microbatch\":0,\"start\":2,\"end\":4}"),
            std::string::npos)
      << json;
  const std::string csv = PlanToCsv(f.plan, &f.sim);
  std::vector<std::string> rows = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  EXPECT_EQ(rows.size(), 1 + f.plan.num_actions());
  EXPECT_EQ(rows[1], "0,0,F,0,0,,,,0,1");
  EXPECT_EQ(PlanToCsv(f.plan).substr(0, 10), "rank,index");
}

}  // namespace
}  // namespace zpipe::render
