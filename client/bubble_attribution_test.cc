#include "client/bubble_attribution.h"

#include <gtest/gtest.h>

#include "core/cost_model.h"
#include "core/planning.h"
#include "core/simulator.h"

namespace zpipe::cli {
namespace {

constexpr double kComm = 0.05;

core::CostModel Costs(const core::Placement& placement) {
  return core::CostModel::Uniform(placement.num_stages(), {.f = 1, .b = 1, .w = 1}, kComm);
}

core::Plan ZbvPlan() {
  core::PlanRequest req;
  req.schedule = "zb-v";
  req.pipeline = 2;
  req.microbatches = 4;
  req.inputs = [](const core::Placement& placement) {
    return core::PlanInputs{.cost = Costs(placement)};
  };
  auto planned = core::PlanSchedule(req);
  EXPECT_TRUE(planned.ok()) << planned.status();
  return planned->plan;
}

// A rank's timeline as GetTrace sends it, from a simulation of `plan`.
void AddRanks(const core::Plan& plan, const core::SimResult& sim, int data_rank,
              google::protobuf::RepeatedPtrField<v1::RankTrace>* out) {
  for (int r = 0; r < plan.num_ranks(); ++r) {
    v1::RankTrace* rank = out->Add();
    rank->set_pipeline_rank(r);
    rank->set_data_rank(data_rank);
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      const core::Action& a = plan.ranks[r][k];
      v1::TracedAction* t = rank->add_actions();
      t->set_kind(std::string(core::ActionKindName(a.kind)));
      t->set_stage(a.stage);
      t->set_microbatch(a.microbatch);
      t->set_start(sim.timings[r][k].start);
      t->set_end(sim.timings[r][k].end);
    }
  }
}

core::SimResult Simulated(const core::Plan& plan, double comm,
                          const std::vector<std::vector<double>>* durations = nullptr) {
  core::CostModel cost = Costs(plan.placement);
  cost.comm = comm;
  core::SimOptions options;
  options.action_durations = durations;
  auto sim = core::Simulate(plan, cost, options);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return *sim;
}

// The trace of an iteration that ran exactly as planned (one replica).
v1::GetTraceResponse AsPlanned(const core::Plan& plan) {
  const core::SimResult sim = Simulated(plan, kComm);
  v1::GetTraceResponse trace;
  AddRanks(plan, sim, 0, trace.mutable_predicted());
  AddRanks(plan, sim, 0, trace.mutable_ranks());
  return trace;
}

TEST(BubbleAttributionTest, AnIterationThatRanAsPlannedHasNothingToAttribute) {
  const core::Plan plan = ZbvPlan();
  const v1::GetTraceResponse trace = AsPlanned(plan);
  auto a = AttributeBubble(plan, trace);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NEAR(a->comm_s, kComm, 1e-12);
  EXPECT_GT(a->predicted, 0);
  EXPECT_NEAR(a->replayed, a->predicted, 1e-12);
  EXPECT_NEAR(a->measured, a->predicted, 1e-12);
}

TEST(BubbleAttributionTest, SlowActionsAndSlowHandOversGoToTheirOwnShare) {
  const core::Plan plan = ZbvPlan();
  v1::GetTraceResponse trace;
  AddRanks(plan, Simulated(plan, kComm), 0, trace.mutable_predicted());
  // Replica 0: rank 1's first F took 3 instead of 1, hand-overs as planned. Replica 1: actions as
  // planned, every hand-over 0.5 instead of 0.05.
  std::vector<std::vector<double>> durations(plan.num_ranks());
  const core::CostModel cost = Costs(plan.placement);
  bool slowed = false;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    for (const core::Action& a : plan.ranks[r]) {
      double d = cost.Duration(a);
      if (r == 1 && a.kind == core::ActionKind::kForward && !slowed) {
        d = 3;
        slowed = true;
      }
      durations[r].push_back(d);
    }
  }
  AddRanks(plan, Simulated(plan, kComm, &durations), 0, trace.mutable_ranks());
  AddRanks(plan, Simulated(plan, 0.5), 1, trace.mutable_ranks());
  auto a = AttributeBubble(plan, trace);
  ASSERT_TRUE(a.ok()) << a.status();
  // The replay reproduces replica 0 exactly and replica 1's actions as planned: the replayed
  // bubble is the mean of replica 0's and the plan's.
  const core::SimResult replica0 = Simulated(plan, kComm, &durations);
  const core::SimResult replica1 = Simulated(plan, 0.5);
  const core::SimResult planned = Simulated(plan, kComm);
  EXPECT_GT(a->actions(), 0.001);  // the slow F
  EXPECT_GT(a->runtime(), 0.001);  // the slow hand-overs
  EXPECT_NEAR(a->replayed, (replica0.bubble_rate + planned.bubble_rate) / 2, 1e-9);
  EXPECT_NEAR(a->measured, (replica0.bubble_rate + replica1.bubble_rate) / 2, 1e-9);
}

TEST(BubbleAttributionTest, AnIncompleteTraceIsAnError) {
  const core::Plan plan = ZbvPlan();
  v1::GetTraceResponse trace = AsPlanned(plan);
  auto* actions = trace.mutable_ranks(1)->mutable_actions();
  for (int k = 0; k < actions->size(); ++k) {
    if ((*actions)[k].kind() == "W") {
      actions->DeleteSubrange(k, 1);
      break;
    }
  }
  auto a = AttributeBubble(plan, trace);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("executed (replica 0) timeline of rank 1 lacks W"),
            std::string::npos)
      << a.status();
}

}  // namespace
}  // namespace zpipe::cli
