#include "core/timeline.h"

#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "core/grad_sync.h"
#include "core/plan_export.h"
#include "core/schedule.h"

namespace zpipe::core {
namespace {

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

TEST(TimelineTest, JsonAndCsvExports) {
  Fixture f = OneF1B(2, 2);
  const std::string json = PlanToJson(f.plan, &f.sim);
  EXPECT_NE(json.find("\"makespan\":9"), std::string::npos) << json;
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
}  // namespace zpipe::core
