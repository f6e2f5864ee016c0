#include "render/chrome_trace.h"

#include <algorithm>
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
#include "render/timeline.h"

namespace zpipe::render {
namespace {

using core::Action;
using core::ActionKind;
using core::ActionToString;
using core::CostModel;
using core::ExecutedTimeline;
using core::ParsePlanText;
using core::Plan;
using core::PredictedTimeline;
using core::RankTimeline;
using core::SimResult;
using core::Simulate;
using core::StageCost;
using core::TimedAction;
using core::TimelineAsPlan;
using core::ToPlanAndTimes;

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

// Receives posted together (lookahead) overlap from post to arrival; complete events on one
// thread must nest, so the later ones go to extra RECV lanes right below the track, and no two
// events of one (process, thread) overlap.
TEST(ChromeTraceTest, OverlappingSendsAndReceivesSpillIntoExtraLanes) {
  ExecutedTimeline t;
  t.iteration = 0;
  RankTimeline r1{1, 0, "w1", {}};
  r1.actions.push_back({Action::Comm(ActionKind::kRecvAct, 0, 0, 0), 0.000, 0.010});
  r1.actions.push_back({Action::Comm(ActionKind::kRecvAct, 0, 1, 0), 0.001, 0.020});
  r1.actions.push_back({Action::Comm(ActionKind::kRecvAct, 0, 2, 0), 0.002, 0.030});
  r1.actions.push_back({Action::F(1, 0), 0.010, 0.015});
  r1.actions.push_back({Action::Comm(ActionKind::kRecvAct, 0, 3, 0), 0.012, 0.040});  // lane 0
  r1.actions.push_back({Action::Comm(ActionKind::kSendGrad, 1, 0, 0), 0.015, 0.016});
  t.ranks = {r1};
  const nlohmann::json j = nlohmann::json::parse(ChromeTraceJson(t));
  std::map<int, std::string> thread_names;
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  std::map<std::string, int> tid_of;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    const double ts = e["ts"], dur = e["dur"];
    by_tid[e["tid"]].push_back({ts, ts + dur});
    tid_of[e["name"]] = e["tid"];
  }
  const int recv = ChromeTrackOf(ActionKind::kRecvAct);
  EXPECT_EQ(tid_of["RECV_ACT s0 mb0 <- r0"], recv);
  EXPECT_EQ(thread_names[tid_of["RECV_ACT s0 mb1 <- r0"]], "RECV 2");
  EXPECT_EQ(thread_names[tid_of["RECV_ACT s0 mb2 <- r0"]], "RECV 3");
  EXPECT_EQ(tid_of["RECV_ACT s0 mb3 <- r0"], recv);  // the first lane is free again by then
  EXPECT_EQ(tid_of["SEND_GRAD s1 mb0 -> r0"], ChromeTrackOf(ActionKind::kSendGrad));
  for (auto& [tid, spans] : by_tid) {
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
      EXPECT_LE(spans[k - 1].second, spans[k].first + 1e-9) << "tid " << tid;
    }
  }
}

// The executed SVG draws sends and receives on their own tracks below each rank's compute row,
// and a receive posted before the first compute action widens the drawing, not the span.
TEST(ExecutedTimelineTest, SvgHasSendAndReceiveTracksAndTheyDoNotCountAsBusy) {
  const ExecutedTimeline t = Sample();
  const std::string svg = RenderTimelineSvg(t);
  EXPECT_NE(svg.find("<title>SEND_ACT s0 mb0 -&gt; r1 ["), std::string::npos) << svg;
  EXPECT_NE(svg.find("<title>RECV_ACT s0 mb0 &lt;- r0 ["), std::string::npos);
  EXPECT_NE(svg.find("<title>REDUCE chunk0 bucket0 ["), std::string::npos);
  EXPECT_NE(svg.find(">send</text>"), std::string::npos);
  EXPECT_NE(svg.find(">recv</text>"), std::string::npos);
  const TimelineAsPlan p = ToPlanAndTimes(t);
  // Drawn from rank 0's first F (100.000) to its reduction's end (100.060).
  EXPECT_NEAR(p.sim.global_makespan, 0.060, 1e-9);
  EXPECT_NEAR(p.sim.busy[1], 0.019, 1e-9);  // F + BW, not the receive
  ExecutedTimeline early = t;
  early.ranks[1].actions.insert(early.ranks[1].actions.begin(),
                                {Action::Comm(ActionKind::kRecvGrad, 2, 0, 2), 99.990, 100.020});
  const TimelineAsPlan q = ToPlanAndTimes(early);
  EXPECT_NEAR(q.sim.global_makespan, 0.070, 1e-9);
  EXPECT_DOUBLE_EQ(q.sim.span, p.sim.span);
  EXPECT_DOUBLE_EQ(q.sim.bubble_rate, p.sim.bubble_rate);
}

}  // namespace
}  // namespace zpipe::render
