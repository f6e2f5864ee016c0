#include "core/chrome_trace.h"

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/cost_model.h"
#include "core/executed_timeline.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zpipe::core {
namespace {

ExecutedTimeline Sample() {
  ExecutedTimeline t;
  t.title = "job \"j\" iteration 2";
  t.iteration = 2;
  RankTimeline r0{0, 0, "w0", {}};
  r0.actions.push_back({Action::F(0, 0), 100.0, 100.010});
  r0.actions.push_back({Action::Comm(ActionKind::kSendAct, 0, 0, 1), 100.010, 100.011});
  r0.actions.push_back({Action::B(0, 0), 100.030, 100.040});
  r0.actions.push_back({Action::W(0, 0), 100.040, 100.048});
  r0.actions.push_back({Action::Reduce(0, 0), 100.048, 100.060});
  RankTimeline r1{1, 0, "w1", {}};
  r1.actions.push_back({Action::Comm(ActionKind::kRecvAct, 0, 0, 0), 100.005, 100.011});
  r1.actions.push_back({Action::F(1, 0), 100.011, 100.021});
  r1.actions.push_back({Action::BW(1, 0), 100.021, 100.030});
  t.ranks = {r0, r1};
  return t;
}

TEST(ChromeTraceTest, EveryActionIsACompleteEventOnItsRankAndTrack) {
  const ExecutedTimeline t = Sample();
  const nlohmann::json j = nlohmann::json::parse(ChromeTraceJson(t));
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::multiset<std::tuple<int, int, std::string>> events;  // pid, tid, name
  double min_ts = 1e300;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      process_names[e["pid"]] = e["args"]["name"];
    } else if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names[{e["pid"], e["tid"]}] = e["args"]["name"];
    } else if (e["ph"] == "X") {
      events.insert({e["pid"].get<int>(), e["tid"].get<int>(), e["name"].get<std::string>()});
      min_ts = std::min(min_ts, e["ts"].get<double>());
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_EQ(e["args"]["iteration"], 2);
    }
  }
  EXPECT_DOUBLE_EQ(min_ts, 0);  // rebased
  EXPECT_EQ(process_names.size(), 2u);
  EXPECT_NE(process_names[0].find("rank 0"), std::string::npos);
  EXPECT_NE(process_names[1].find("w1"), std::string::npos);
  size_t total = 0;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    for (const TimedAction& a : t.ranks[r].actions) {
      const int pid = static_cast<int>(r), tid = ChromeTrackOf(a.action.kind);
      EXPECT_EQ(events.count({pid, tid, ActionToString(a.action)}), 1u) << ActionToString(a.action);
      EXPECT_FALSE(thread_names[std::make_pair(pid, tid)].empty());
      ++total;
    }
  }
  EXPECT_EQ(events.size(), total);
  EXPECT_EQ(thread_names[std::make_pair(0, ChromeTrackOf(ActionKind::kReduce))], "REDUCE");
  EXPECT_EQ(thread_names[std::make_pair(1, ChromeTrackOf(ActionKind::kRecvAct))], "RECV");
  EXPECT_NE(ChromeTrackOf(ActionKind::kForward), ChromeTrackOf(ActionKind::kBackwardWeight));
}

TEST(ChromeTraceTest, PredictedTimelineOfAPlanFollowsAsSeparateProcesses) {
  absl::StatusOr<Plan> plan = ParsePlanText(
      "zpipe-plan v1\nschedule 1f1b\nplacement linear ranks 2 chunks 1 microbatches 2\n"
      "rank 0\nF s0 mb0\nF s0 mb1\nBW s0 mb0\nBW s0 mb1\n"
      "rank 1\nF s1 mb0\nBW s1 mb0\nF s1 mb1\nBW s1 mb1\n");
  ASSERT_TRUE(plan.ok()) << plan.status();
  CostModel cost = CostModel::Uniform(2, StageCost{});
  absl::StatusOr<SimResult> sim = Simulate(*plan, cost);
  ASSERT_TRUE(sim.ok()) << sim.status();
  const ExecutedTimeline predicted = PredictedTimeline(*plan, *sim, 1000.0);
  ASSERT_EQ(predicted.ranks.size(), 2u);
  EXPECT_EQ(predicted.ranks[1].actions.size(), 4u);
  EXPECT_EQ(predicted.ranks[1].actions[1].action, Action::BW(1, 0));  // plan order
  ChromeTraceOptions options;
  options.predicted = &predicted;
  const nlohmann::json j = nlohmann::json::parse(ChromeTraceJson(Sample(), options));
  int predicted_events = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"].get<int>() >= 100000) ++predicted_events;
  }
  EXPECT_EQ(predicted_events, 8);

  const std::string svg = RenderTimelineSvg(Sample());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("F s1 mb0"), std::string::npos);
  const TimelineAsPlan as_plan = ToPlanAndTimes(Sample());
  EXPECT_GT(as_plan.sim.bubble_rate, 0);
  EXPECT_LT(as_plan.sim.bubble_rate, 1);
}

}  // namespace
}  // namespace zpipe::core
