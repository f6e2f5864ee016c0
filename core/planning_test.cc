#include "core/planning.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "core/lowering.h"
#include "core/status_field.h"
#include "core/testing/unit_request.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

constexpr StageCost kUnit{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5};

PlanRequest Request(std::string schedule, int p, int m, StageCost stage = kUnit, double comm = 0,
                    int buckets = 0, double reduce_cost = 0) {
  PlanRequest req;
  req.schedule = std::move(schedule);
  req.pipeline = p;
  req.microbatches = m;
  req.inputs = [=](const Placement& placement) {
    return UniformInputs(placement, stage, comm, buckets, reduce_cost);
  };
  return req;
}

// The entry point gives what the chain of calls it replaces gave.
TEST(PlanningTest, EqualsTheChainOfCoreCalls) {
  for (const char* name : {"1f1b", "zb-2p", "zb-v", "interleaved"}) {
    absl::StatusOr<PlannedSchedule> planned = PlanSchedule(Request(name, 4, 8, kUnit, 0.1, 2, 0.5));
    ASSERT_TRUE(planned.ok()) << name << ": " << planned.status();
    const ScheduleKind kind = *ParseScheduleKind(name);
    ScheduleRequest req;
    req.pipeline = 4;
    req.microbatches = 8;
    req.cost = CostModel::Uniform(PlacementFor(kind, 4).num_stages(), kUnit, 0.1);
    absl::StatusOr<Plan> plan = GenerateSchedule(kind, req);
    ASSERT_TRUE(plan.ok());
    absl::StatusOr<Plan> lowered = LowerComm(*plan);
    ASSERT_TRUE(lowered.ok());
    absl::StatusOr<GradSyncPlan> synced =
        PlanGradSync(*lowered, GradSyncLayout::Uniform(req.cost.num_stages(), 2));
    ASSERT_TRUE(synced.ok());
    EXPECT_EQ(planned->plan, synced->plan) << name;
    EXPECT_EQ(planned->kind, kind);
    EXPECT_EQ(planned->buckets.size(), synced->buckets.size());
    EXPECT_DOUBLE_EQ(planned->memory_limit, DefaultMemoryLimit(kind, 4, 8, req.cost));
    absl::StatusOr<SimResult> sim =
        Simulate(synced->plan, req.cost, {.reduce_cost = 0.5, .release_during_w = true});
    ASSERT_TRUE(sim.ok());
    EXPECT_DOUBLE_EQ(planned->sim.span, sim->span) << name;
    EXPECT_DOUBLE_EQ(planned->sim.reduce_overlap, sim->reduce_overlap) << name;
  }
  PlanRequest compute_only = Request("zb-h1", 4, 8);
  compute_only.lower = false;
  absl::StatusOr<PlannedSchedule> planned = PlanSchedule(compute_only);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_FALSE(planned->plan.IsLowered());
}

// Every error the request can cause names its field in the status, not only in the message.
TEST(PlanningTest, ErrorsNameTheRequestField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    PlanRequest request;
    std::string field;
  };
  PlanRequest low_memory = Request("1f1b", 4, 8);
  low_memory.memory_limit = 1;
  PlanRequest low_memory_zb = Request("zb-2p", 4, 8);
  low_memory_zb.memory_limit = 0.5;
  PlanRequest low_memory_v = Request("zb-v", 4, 8);
  low_memory_v.memory_limit = 1;
  PlanRequest inf_memory = Request("zb-2p", 4, 8);
  inf_memory.memory_limit = std::numeric_limits<double>::infinity();
  PlanRequest chunks = Request("interleaved", 4, 8);
  chunks.chunks = 17;
  PlanRequest no_inputs = Request("1f1b", 4, 8);
  no_inputs.inputs = nullptr;
  PlanRequest wrong_stages = Request("zb-v", 4, 8);
  wrong_stages.inputs = [](const Placement&) { return PlanInputs{CostModel::Uniform(4, kUnit)}; };
  const std::vector<Case> cases = {
      {Request("nope", 4, 8), "schedule"},
      {Request("1f1b", 0, 8), "pipeline"},
      {Request("1f1b", 65, 8), "pipeline"},
      {Request("1f1b", 4, 0), "microbatches"},
      {Request("zb-v", 64, 1024), "microbatches"},
      {Request("interleaved", 4, 6), "microbatches"},
      {Request("dualpipe-v", 4, 6), "microbatches"},
      {chunks, "chunks"},
      {low_memory, "memory_limit"},
      {low_memory_zb, "memory_limit"},
      {low_memory_v, "memory_limit"},
      {inf_memory, "memory_limit"},
      {no_inputs, "cost"},
      {wrong_stages, "cost"},
      {Request("1f1b", 4, 8, {.f = nan}), "cost.stages[0].f"},
      {Request("1f1b", 4, 8, {.w = -1}), "cost.stages[0].w"},
      {Request("1f1b", 4, 8, {.mem_f = 1e300}), "cost.stages[0].mem_f"},
      {Request("zb-v", 4, 8, {.mem_b = 0.5, .mem_w = -1.5}), "cost.stages[0]"},
      {Request("1f1b", 4, 8, kUnit, -1), "cost.comm"},
      {Request("1f1b", 4, 8, kUnit, 0, 2000), "buckets_per_stage"},
      {Request("zb-v", 64, 8, kUnit, 0, 1000), "buckets_per_stage"},
      {Request("1f1b", 4, 8, kUnit, 0, 2, nan), "reduce_cost"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<PlannedSchedule> planned = PlanSchedule(c.request);
    ASSERT_FALSE(planned.ok()) << c.field;
    EXPECT_EQ(ErrorField(planned.status()), c.field) << planned.status();
    EXPECT_TRUE(planned.status().code() == absl::StatusCode::kInvalidArgument ||
                planned.status().code() == absl::StatusCode::kFailedPrecondition)
        << planned.status();
  }
}

PlanRequest Searched(std::string schedule, int p, int m, double comm, double budget = 1) {
  PlanRequest req = Request(std::move(schedule), p, m, kUnit, comm);
  req.search = {.budget_seconds = budget, .seed = 1};
  return req;
}

// 1F1B at m = p: the published order holds each rank to its p - r warm-up forwards; within the
// same memory limit the polish fills the middle ranks deeper and is shorter. The greedy pass
// alone (budget 0) and a request without the polish keep the published order.
TEST(PlanningTest, PolishShortens1F1BAndBudgetZeroKeepsThePublishedOrder) {
  absl::StatusOr<PlannedSchedule> polished = PlanSchedule(Searched("1f1b", 4, 4, 0.1));
  ASSERT_TRUE(polished.ok()) << polished.status();
  EXPECT_NEAR(polished->sim.span, 21.6, 1e-9);
  ASSERT_TRUE(polished->polish.has_value());
  EXPECT_NEAR(polished->polish->generated_span, 22, 1e-9);
  EXPECT_NEAR(polished->polish->span, 21.6, 1e-9);
  EXPECT_TRUE(polished->polish->improved());

  ScheduleRequest sreq;
  sreq.pipeline = 4;
  sreq.microbatches = 4;
  sreq.cost = CostModel::Uniform(4, kUnit, 0.1);
  absl::StatusOr<Plan> published = GenerateSchedule(ScheduleKind::k1F1B, sreq);
  ASSERT_TRUE(published.ok());
  absl::StatusOr<Plan> published_lowered = LowerComm(*published);
  ASSERT_TRUE(published_lowered.ok());
  absl::StatusOr<PlannedSchedule> greedy = PlanSchedule(Searched("1f1b", 4, 4, 0.1, 0));
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_NEAR(greedy->sim.span, 22, 1e-9);
  EXPECT_FALSE(greedy->polish.has_value());
  EXPECT_EQ(greedy->plan, *published_lowered);
  PlanRequest off = Searched("1f1b", 4, 4, 0.1);
  off.polish = false;
  absl::StatusOr<PlannedSchedule> unpolished = PlanSchedule(off);
  ASSERT_TRUE(unpolished.ok()) << unpolished.status();
  EXPECT_EQ(unpolished->plan, *published_lowered);
  EXPECT_FALSE(unpolished->polish.has_value());
}

// A polished plan is a plan like any other: valid under the memory limit once lowered and with
// its reductions, simulated to the span the solver timed, and the same for the same request.
TEST(PlanningTest, PolishedPlansAreValidSimulatedAndDeterministic) {
  struct Case {
    const char* schedule;
    int p, m;
  };
  for (const Case& c : {Case{"1f1b", 4, 4}, Case{"1f1b", 8, 8}, Case{"zb-h1", 8, 8},
                        Case{"zb-2p", 4, 8}, Case{"zb-2p", 8, 16}}) {
    PlanRequest req = Searched(c.schedule, c.p, c.m, 0.1);
    req.inputs = [](const Placement& placement) {
      return UniformInputs(placement, kUnit, 0.1, /*buckets_per_stage=*/2, /*reduce_cost=*/0);
    };
    absl::StatusOr<PlannedSchedule> first = PlanSchedule(req);
    ASSERT_TRUE(first.ok()) << c.schedule << ": " << first.status();
    ASSERT_TRUE(first->polish.has_value()) << c.schedule;
    EXPECT_TRUE(first->polish->improved()) << c.schedule << " p=" << c.p << " m=" << c.m;
    EXPECT_TRUE(first->plan.IsLowered());
    EXPECT_FALSE(first->buckets.empty());
    EXPECT_TRUE(
        ValidatePlan(first->plan, {.cost = &first->cost, .memory_limit = first->memory_limit})
            .ok());
    absl::StatusOr<SimResult> sim = Simulate(first->plan, first->cost);
    ASSERT_TRUE(sim.ok()) << sim.status();
    EXPECT_NEAR(sim->span, first->polish->span, 1e-9) << c.schedule;
    EXPECT_NEAR(first->sim.span, first->polish->span, 1e-9) << c.schedule;
    absl::StatusOr<PlannedSchedule> second = PlanSchedule(req);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(first->plan, second->plan) << c.schedule;
    EXPECT_EQ(first->polish->nodes, second->polish->nodes) << c.schedule;
  }
}

// On plans of at most kPolishRelaxationActions compute actions the polish's tree asks the ranks'
// relaxations at its nodes, whose bounds lead its deepening to shorter plans the plain tree
// misses: V-Half at p = 4, m = 4 (96 actions), its last stage 1.3 times heavier, T_W = 0.6 T_B,
// T_comm = 0.3, searched for 0.1 s, ends at its optimum 35.94 with some seeds and at 36.38 with
// others (the first of them, in 1-20, is taken: seed 1; at 1 s every seed there finds 35.94).
// The polish takes it to 35.94; its tree alone (547 nodes) reaches 36.34 with the relaxations
// and nothing without them (its neighbourhood rounds find 35.94 either way).
TEST(PlanningTest, PolishAsksTheRanksRelaxationsOnSmallPlans) {
  bool polished = false;
  for (uint64_t seed = 1; seed <= 20 && !polished; ++seed) {
    PlanRequest req = Searched("v-half", 4, 4, 0.3, /*budget=*/0.1);
    req.search.seed = seed;
    req.inputs = SkewedInputs;
    absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->polish.has_value());
    EXPECT_NEAR(plan->sim.span, 35.94, 1e-9) << "seed " << seed;
    if (plan->polish->generated_span < 35.94 + 1e-9) continue;
    polished = true;
    EXPECT_NEAR(plan->polish->generated_span, 36.38, 1e-9) << "seed " << seed;
    EXPECT_NEAR(plan->polish->span, 35.94, 1e-9) << "seed " << seed;
    req.polish = false;
    req.lower = false;  // the solver takes the compute plan
    absl::StatusOr<PlannedSchedule> searched = PlanSchedule(req);
    ASSERT_TRUE(searched.ok()) << searched.status();
    // The polish's tree alone (no neighbourhood rounds), with and without the relaxations.
    const int64_t actions = static_cast<int64_t>(searched->plan.num_actions());
    auto tree = [&](bool relaxations) {
      return SolveOptimal(searched->plan, searched->cost, searched->memory_limit,
                          {.time_limit_seconds = 0,
                           .node_limit = PolishNodes(0.1, actions),
                           .rank_relaxation_at_nodes = relaxations});
    };
    absl::StatusOr<OptimalResult> asked = tree(true), plain = tree(false);
    ASSERT_TRUE(asked.ok()) << asked.status();
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_LT(asked->span, 36.38 - 1e-9) << "seed " << seed;
    EXPECT_FALSE(plain->improved) << "seed " << seed;
  }
  EXPECT_TRUE(polished) << "no seed in 1-20 left the polish anything to do";
}

// Where the polish does not apply, the plan is the generated one: gpipe (the textbook
// baseline), a recompute policy (the solver has no R), and plans above kMaxPolishActions.
// Where the published order is already optimal (1F1B and ZB-H1 without communication time) the
// polish finds nothing shorter and keeps it.
TEST(PlanningTest, PolishLeavesPlansItDoesNotApplyToOrCannotShorten) {
  auto same_as_greedy = [](PlanRequest req, bool polished) {
    absl::StatusOr<PlannedSchedule> searched = PlanSchedule(req);
    ASSERT_TRUE(searched.ok()) << req.schedule << ": " << searched.status();
    EXPECT_EQ(searched->polish.has_value(), polished) << req.schedule;
    req.search.budget_seconds = 0;
    absl::StatusOr<PlannedSchedule> greedy = PlanSchedule(req);
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    EXPECT_EQ(searched->plan, greedy->plan) << req.schedule << " p=" << req.pipeline;
  };
  same_as_greedy(Searched("gpipe", 4, 4, 0.1), false);
  PlanRequest recompute = Searched("1f1b", 4, 4, 0.1);
  recompute.recompute = RecomputePolicy::kAuto;
  same_as_greedy(recompute, false);
  same_as_greedy(Searched("zb-h1", 8, 32, 0.1), false);  // 768 compute actions
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    for (const auto& [p, m] : {std::pair{4, 4}, std::pair{4, 8}, std::pair{8, 8}}) {
      same_as_greedy(Searched(schedule, p, m, 0), true);
    }
  }
  EXPECT_EQ(PolishNodes(0, 100), 0);
  EXPECT_EQ(PolishNodes(1, kMaxPolishActions + 1), 0);
  EXPECT_EQ(PolishNodes(1, 100), 5243);   // kPolishWork / 100
  EXPECT_EQ(PolishNodes(0.1, 100), 525);
  EXPECT_EQ(PolishNodes(0.001, 100), 200);  // one pass for each of the solver's two phases
  EXPECT_EQ(PolishNodes(1, 400), 1311);
  EXPECT_EQ(PolishNodes(1, 512), 1024);
  EXPECT_EQ(PolishNodes(2, 512), 2048);
  // Neighbourhood rounds: kPolishNeighbourhoodWork / actions per second, only on plans where the
  // tree asks the relaxations.
  EXPECT_EQ(PolishNeighbourhoodNodes(0, 100), 0);
  EXPECT_EQ(PolishNeighbourhoodNodes(1, kPolishRelaxationActions + 1), 0);
  EXPECT_EQ(PolishNeighbourhoodNodes(1, 192), 104167);
  EXPECT_EQ(PolishNeighbourhoodNodes(0.5, 100), 100000);
}

// Small plans' polish starts with neighbourhood rounds: V-Half at p = 4, m = 8, T_comm 0.1 is
// searched to 55 (seed 1) and polished to 54.8, the optimum; the tree alone keeps 55.
TEST(PlanningTest, PolishSearchesNeighbourhoodsOfSmallPlans) {
  PlanRequest req = UnitRequest("v-half", 4, 8);
  req.search = {.budget_seconds = 1, .seed = 1};
  absl::StatusOr<PlannedSchedule> plan = PlanSchedule(req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->polish.has_value());
  EXPECT_NEAR(plan->polish->generated_span, 55, 1e-9);
  EXPECT_NEAR(plan->polish->span, 54.8, 1e-9);
  EXPECT_NEAR(plan->sim.span, 54.8, 1e-9);
  EXPECT_GT(plan->polish->nodes, PolishNeighbourhoodNodes(1, 192));
}

TEST(StatusFieldTest, AttachesAndReadsAField) {
  EXPECT_EQ(ErrorField(absl::InvalidArgumentError("x")), "");
  EXPECT_TRUE(WithField(absl::OkStatus(), "pipeline").ok());
  const absl::Status st = WithField(absl::InvalidArgumentError("bad"), "cost.stages[3].f");
  EXPECT_EQ(ErrorField(st), "cost.stages[3].f");
  EXPECT_EQ(st.message(), "bad");
  EXPECT_EQ(FieldRoot("cost.stages[3].f"), "cost");
  EXPECT_EQ(FieldRoot("memory_limit"), "memory_limit");
}

}  // namespace
}  // namespace zpipe::core
