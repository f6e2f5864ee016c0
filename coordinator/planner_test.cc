#include "coordinator/planner.h"

#include <gtest/gtest.h>

#include "core/lowering.h"
#include "core/planning.h"
#include "core/plan.h"
#include "core/schedule.h"

namespace zpipe::coordinator {
namespace {

JobSpec Synthetic(const std::string& schedule, int p, int m, int d = 1) {
  JobSpec spec;
  spec.model = SyntheticConfig{/*forward_ms=*/10, /*backward_ms=*/10, /*weight_ms=*/8,
                               /*activation_kb=*/64, /*params_mb=*/8};
  spec.pipeline = p;
  spec.data = d;
  spec.schedule = schedule;
  spec.microbatches = m;
  spec.iterations = 1;
  return spec;
}

// The plan is the core chain's on the spec's cost model: lowered, with REDUCE actions, simulated
// with the ring all-reduce time of a bucket.
TEST(PlannerTest, PlansThroughTheCoreChain) {
  const JobSpec spec = Synthetic("zb-v", 4, 8, /*d=*/2);
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const JobPlan& p = **plan;
  EXPECT_EQ(p.plan.num_stages(), 8);
  EXPECT_TRUE(p.plan.IsLowered());
  EXPECT_FALSE(p.buckets.empty());
  EXPECT_GT(p.sim.total_reduce, 0);
  EXPECT_EQ(p.stages.size(), 8u);
  EXPECT_EQ(p.text, core::PlanToText(p.plan));
  core::ScheduleRequest req;
  req.pipeline = 4;
  req.microbatches = 8;
  req.cost = CostModelFor(spec, 8, 2);
  req.search = {.budget_seconds = 1, .seed = 1};  // schedule.search_budget's default
  absl::StatusOr<core::Plan> compute = core::GenerateSchedule(core::ScheduleKind::kZbV, req);
  ASSERT_TRUE(compute.ok());
  absl::StatusOr<core::Plan> lowered = core::LowerComm(*compute);
  ASSERT_TRUE(lowered.ok());
  // The same compute order once REDUCE actions are dropped.
  core::Plan without_reduce = p.plan;
  for (auto& rank : without_reduce.ranks) {
    std::erase_if(rank, [](const core::Action& a) { return a.kind == core::ActionKind::kReduce; });
  }
  EXPECT_EQ(without_reduce, *lowered);
}

// The compute actions of `plan`, without SEND/RECV and REDUCE.
core::Plan ComputeOnly(core::Plan plan) {
  for (auto& rank : plan.ranks) {
    std::erase_if(rank, [](const core::Action& a) {
      return a.kind == core::ActionKind::kReduce || a.kind == core::ActionKind::kSendAct ||
             a.kind == core::ActionKind::kRecvAct;
    });
  }
  return plan;
}

// A job runs the plan `zpipe plan` shows for its shape and costs: the search with budget 1 and
// seed 1, not the greedy pass. ZB-V p = 8, m = 8 with T_F = T_B = T_W = 1 and T_comm = 0.1 (the
// job's memory model: `zpipe plan --memory f=0.5,b=0,w=-0.5`): greedy 58.2, searched 56.4.
TEST(PlannerTest, JobRunsTheSearchedPlanOfZpipePlan) {
  JobSpec spec;
  // v = 2: each stage gets half of these; 97.65625 KiB at 1 GB/s take 0.1 ms.
  spec.model = SyntheticConfig{/*forward_ms=*/2, /*backward_ms=*/2, /*weight_ms=*/2,
                               /*activation_kb=*/97.65625, /*params_mb=*/8};
  spec.pipeline = 8;
  spec.schedule = "zb-v";
  spec.microbatches = 8;
  spec.iterations = 1;
  absl::StatusOr<std::shared_ptr<const JobPlan>> searched = PlanJob(spec);
  ASSERT_TRUE(searched.ok()) << searched.status();
  EXPECT_NEAR((*searched)->sim.span, 56.4, 1e-9);

  // What `zpipe plan --schedule zb-v -p 8 -m 8 --cost f=1,b=1,w=1,comm=0.1
  // --memory f=0.5,b=0,w=-0.5` plans (client/plan_command.cc Request, default --budget and --seed).
  const core::CostModel cost = CostModelFor(spec, 16, 2);
  ASSERT_DOUBLE_EQ(cost.comm, 0.1);
  core::PlanRequest req;
  req.schedule = "zb-v";
  req.pipeline = 8;
  req.microbatches = 8;
  req.inputs = [&cost](const core::Placement& placement) {
    return core::UniformInputs(placement, cost.stages[0], cost.comm);
  };
  req.search = {.budget_seconds = 1, .seed = 1};
  absl::StatusOr<core::PlannedSchedule> shown = core::PlanSchedule(req);
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(ComputeOnly((*searched)->plan), ComputeOnly(shown->plan));
  EXPECT_DOUBLE_EQ((*searched)->sim.span, shown->sim.span);

  // schedule.search_budget 0: the greedy pass alone, as `zpipe plan --budget 0`.
  spec.search_budget = 0;
  absl::StatusOr<std::shared_ptr<const JobPlan>> greedy = PlanJob(spec);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_NEAR((*greedy)->sim.span, 58.2, 1e-9);
}

// schedule.recompute: auto at a limit of two microbatches' activations plans Rs (the workers run
// them), with a span shorter than keeping everything; unset plans none.
TEST(PlannerTest, RecomputeAutoPlansRsWhereTheyShortenTheSpan) {
  JobSpec spec = Synthetic("zb-1p", 4, 8);
  spec.memory_limit = 2;
  absl::StatusOr<std::shared_ptr<const JobPlan>> keep = PlanJob(spec);
  spec.recompute = "auto";
  absl::StatusOr<std::shared_ptr<const JobPlan>> recompute = PlanJob(spec);
  ASSERT_TRUE(keep.ok()) << keep.status();
  ASSERT_TRUE(recompute.ok()) << recompute.status();
  auto count_r = [](const core::Plan& plan) {
    int n = 0;
    for (const auto& rank : plan.ranks) {
      for (const core::Action& a : rank) n += a.kind == core::ActionKind::kRecompute;
    }
    return n;
  };
  EXPECT_EQ(count_r((*keep)->plan), 0);
  EXPECT_GT(count_r((*recompute)->plan), 0);
  EXPECT_LT((*recompute)->sim.span, (*keep)->sim.span);
  EXPECT_NE((*recompute)->text.find("\nR s0 mb"), std::string::npos);
  // A synthetic stage's kept input is assumed half its activations.
  EXPECT_DOUBLE_EQ(CostModelFor(spec, 4, 1).stages[0].mem_keep, 0.5);
}

TEST(PlannerTest, GptKeepsOnlyItsInputWhenRecomputed) {
  JobSpec spec;
  spec.model = GptConfig{/*layers=*/4, /*hidden=*/64, /*heads=*/4, /*seq_len=*/32, /*vocab=*/128};
  // Two layers per stage: 1 / (2 (17 + 2.5 * 4 * 32 / 64)) = 1 / 44.
  EXPECT_DOUBLE_EQ(CostModelFor(spec, 2, 1).stages[0].mem_keep, 1.0 / 44);
}

JobSpec Gpt(int layers, const std::string& schedule, int p, int m) {
  JobSpec spec;
  spec.model = GptConfig{layers, /*hidden=*/64, /*heads=*/4, /*seq_len=*/32, /*vocab=*/128};
  spec.pipeline = p;
  spec.schedule = schedule;
  spec.microbatches = m;
  spec.microbatch_size = 2;
  spec.iterations = 1;
  return spec;
}

// GPT stages cost what their layers cost: equal when the layers split evenly, and with an uneven
// split the first L % S stages (one layer more, as the worker cuts them) cost that much more.
TEST(PlannerTest, GptStagesAreCostedByTheirLayers) {
  const core::CostModel even = CostModelFor(Gpt(8, "zb-v", 2, 4), 4, 2);
  ASSERT_EQ(even.num_stages(), 4);
  for (const core::StageCost& c : even.stages) EXPECT_EQ(c.f, even.stages[0].f);

  // 6 layers on 4 stages: 2, 2, 1, 1.
  const JobSpec uneven = Gpt(6, "zb-v", 2, 4);
  const core::CostModel cost = CostModelFor(uneven, 4, 2);
  ASSERT_EQ(cost.num_stages(), 4);
  EXPECT_DOUBLE_EQ(cost.stages[0].f, 2 * cost.stages[2].f);
  EXPECT_DOUBLE_EQ(cost.stages[1].w, 2 * cost.stages[3].w);
  EXPECT_DOUBLE_EQ(cost.stages[0].f, even.stages[0].f);  // 2 layers either way
  EXPECT_EQ(cost.comm, even.comm);

  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(uneven);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->plan.num_stages(), 4);
  ASSERT_EQ((*plan)->stages.size(), 4u);
  EXPECT_DOUBLE_EQ((*plan)->stages[0].params_mb, 2 * (*plan)->stages[3].params_mb);
}

// Errors core attributes to a request field come back naming the spec's field.
TEST(PlannerTest, ErrorsNameTheSpecField) {
  struct Case {
    JobSpec spec;
    std::string prefix;
  };
  JobSpec low = Synthetic("1f1b", 4, 8);
  low.memory_limit = 0.5;
  JobSpec interleaved = Synthetic("interleaved", 2, 3);
  JobSpec dualpipe = Synthetic("dualpipe-v", 4, 6);
  JobSpec unknown = Synthetic("2f2b", 4, 8);
  for (const Case& c : std::vector<Case>{
           {low, "spec.schedule.memory_limit: 1f1b: rank 0 needs"},
           {interleaved, "spec.batch.microbatches: interleaved: microbatches (3)"},
           {dualpipe, "spec.batch.microbatches: dualpipe-v: needs microbatches >= 2 * pipeline"},
           {unknown, "spec.schedule.kind: unknown schedule '2f2b'"},
       }) {
    absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(c.spec);
    ASSERT_FALSE(plan.ok()) << c.prefix;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
    EXPECT_EQ(plan.status().message().substr(0, c.prefix.size()), c.prefix) << plan.status();
  }
}

}  // namespace
}  // namespace zpipe::coordinator
