#include "core/recompute.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/planning.h"
#include "core/simulator.h"
#include "core/status_field.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

// F, B, W of one unit each; a recomputing stage keeps a tenth of its activations.
constexpr StageCost kStage{
    .f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = 0, .mem_w = -1, .r = 1, .mem_keep = 0.1};

// One rank, one stage, one microbatch: F, R, B, W.
Plan OneStage(std::vector<Action> actions) {
  Plan plan = EmptyPlan("test", Placement::Linear(1), 1);
  plan.ranks[0] = std::move(actions);
  return plan;
}

PlanRequest Request(std::string schedule, int p, int m, double limit, RecomputePolicy policy) {
  PlanRequest req;
  req.schedule = std::move(schedule);
  req.pipeline = p;
  req.microbatches = m;
  req.memory_limit = limit;
  req.recompute = policy;
  req.inputs = [](const Placement& placement) { return UniformInputs(placement, kStage); };
  return req;
}

int Count(const std::vector<bool>& stages) { return std::count(stages.begin(), stages.end(), true); }

TEST(RecomputeTest, ActionHasATextForm) {
  EXPECT_EQ(ActionToString(Action::R(3, 7)), "R s3 mb7");
  absl::StatusOr<Action> parsed = ParseAction("R s3 mb7");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, Action::R(3, 7));
  EXPECT_TRUE(IsCompute(ActionKind::kRecompute));
  const Plan plan = OneStage({Action::F(0, 0), Action::R(0, 0), Action::B(0, 0), Action::W(0, 0)});
  absl::StatusOr<Plan> round = ParsePlanText(PlanToText(plan));
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(*round, plan);
}

TEST(RecomputeTest, SimulatorTimesAndChargesR) {
  CostModel cost = CostModel::Uniform(1, kStage);
  cost.stages[0].r = 2;
  const Plan plan =
      OneStage({Action::F(0, 0), Action::R(0, 0), Action::B(0, 0), Action::W(0, 0)});
  absl::StatusOr<SimResult> sim = Simulate(plan, cost);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_DOUBLE_EQ(sim->timings[0][1].start, 1);  // R after F
  EXPECT_DOUBLE_EQ(sim->timings[0][2].start, 3);  // B after R (T_R = 2)
  EXPECT_DOUBLE_EQ(sim->span, 5);
  EXPECT_DOUBLE_EQ(sim->recompute_time, 2);
  EXPECT_DOUBLE_EQ(sim->busy[0], 5);
  // F holds mem_keep, R brings it to mem_f: the peak is mem_f, reached at R.
  EXPECT_DOUBLE_EQ(sim->peak_memory[0], 1);
}

TEST(RecomputeTest, RecomputedForwardHoldsOnlyWhatItKeeps) {
  // Two microbatches both forwarded before either backward: 2 x mem_f kept, or 2 x mem_keep
  // and one R's worth when they are recomputed one after the other.
  const CostModel cost = CostModel::Uniform(1, kStage);
  Plan kept = EmptyPlan("test", Placement::Linear(1), 2);
  kept.ranks[0] = {Action::F(0, 0), Action::F(0, 1), Action::B(0, 0),
                   Action::W(0, 0), Action::B(0, 1), Action::W(0, 1)};
  Plan recomputed = kept;
  recomputed.ranks[0] = {Action::F(0, 0), Action::F(0, 1), Action::R(0, 0), Action::B(0, 0),
                         Action::W(0, 0), Action::R(0, 1), Action::B(0, 1), Action::W(0, 1)};
  EXPECT_DOUBLE_EQ(Simulate(kept, cost)->peak_memory[0], 2);
  EXPECT_DOUBLE_EQ(Simulate(recomputed, cost)->peak_memory[0], 1.1);
  EXPECT_FALSE(ValidatePlan(kept, {.cost = &cost, .memory_limit = 1.5}).ok());
  EXPECT_TRUE(ValidatePlan(recomputed, {.cost = &cost, .memory_limit = 1.5}).ok());
}

TEST(RecomputeTest, ValidatorPlacesRBetweenItsForwardAndBackward) {
  const auto check = [](std::vector<Action> actions) {
    return ValidatePlan(OneStage(std::move(actions)));
  };
  EXPECT_TRUE(check({Action::F(0, 0), Action::R(0, 0), Action::B(0, 0), Action::W(0, 0)}).ok());
  EXPECT_TRUE(check({Action::F(0, 0), Action::R(0, 0), Action::BW(0, 0)}).ok());
  absl::Status before_f =
      check({Action::R(0, 0), Action::F(0, 0), Action::B(0, 0), Action::W(0, 0)});
  EXPECT_NE(before_f.message().find("recomputes before its F"), std::string::npos) << before_f;
  absl::Status after_b =
      check({Action::F(0, 0), Action::B(0, 0), Action::R(0, 0), Action::W(0, 0)});
  EXPECT_NE(after_b.message().find("recomputes after its backward"), std::string::npos)
      << after_b;
  absl::Status twice = check(
      {Action::F(0, 0), Action::R(0, 0), Action::R(0, 0), Action::B(0, 0), Action::W(0, 0)});
  EXPECT_NE(twice.message().find("appears more than once"), std::string::npos) << twice;
  Plan wrong_rank = EmptyPlan("test", Placement::Linear(2), 1);
  wrong_rank.ranks[0] = {Action::F(0, 0), Action::R(1, 0), Action::B(0, 0), Action::W(0, 0)};
  wrong_rank.ranks[1] = {Action::F(1, 0), Action::B(1, 0), Action::W(1, 0)};
  EXPECT_FALSE(ValidatePlan(wrong_rank).ok());
}

TEST(RecomputeTest, SurrogateChargesRecomputeAtTheBackward) {
  StageCost paper = kStage;
  paper.mem_b = -0.5;
  paper.mem_w = -0.5;
  const CostModel cost = CostModel::Uniform(2, paper);
  const CostModel s = RecomputeSurrogate(cost, {true, false});
  EXPECT_DOUBLE_EQ(s.stages[0].mem_f, 0.1);
  EXPECT_DOUBLE_EQ(s.stages[0].b, 2);      // B + R
  EXPECT_DOUBLE_EQ(s.stages[0].mem_b, 0.9);  // R's memory; B's release moves to W
  EXPECT_DOUBLE_EQ(s.stages[0].mem_w, -1);
  EXPECT_DOUBLE_EQ(s.stages[0].mem_f + s.stages[0].mem_b + s.stages[0].mem_w, 0);
  EXPECT_EQ(s.stages[1].mem_f, paper.mem_f);  // stage 1 keeps
  EXPECT_EQ(s.stages[1].b, paper.b);
}

// The case: at a limit that holds two microbatches' activations, ZB-1p keeping everything
// runs with a large bubble; recomputing the first stages lets them run more in flight.
TEST(RecomputeTest, RecomputationWinsUnderATightLimit) {
  absl::StatusOr<PlannedSchedule> planned =
      PlanSchedule(Request("zb-1p", 4, 8, 2, RecomputePolicy::kAuto));
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_TRUE(planned->keep_span.has_value());
  EXPECT_LT(planned->compute_span, *planned->keep_span);
  EXPECT_LT(planned->compute_bubble, *planned->keep_bubble);
  EXPECT_DOUBLE_EQ(planned->sim.span, planned->compute_span);
  EXPECT_GT(Count(planned->recompute_stages), 0);
  EXPECT_EQ(RecomputedStages(planned->plan), planned->recompute_stages);
  for (double peak : planned->sim.peak_memory) EXPECT_LE(peak, 2 + 1e-9);
  // The bound holds for every plan the policy could have chosen, recomputing or not.
  EXPECT_LE(planned->span_lower_bound, planned->sim.span);
  EXPECT_LE(planned->span_lower_bound, *planned->keep_span);
  // What it chose is the same plan a caller gets by asking for those stages' recomputation.
  absl::StatusOr<PlannedSchedule> keep =
      PlanSchedule(Request("zb-1p", 4, 8, 2, RecomputePolicy::kOff));
  ASSERT_TRUE(keep.ok()) << keep.status();
  EXPECT_DOUBLE_EQ(keep->sim.span, *planned->keep_span);
}

TEST(RecomputeTest, RecomputationMakesAPlanExist) {
  EXPECT_FALSE(PlanSchedule(Request("1f1b", 4, 8, 2, RecomputePolicy::kOff)).ok());
  absl::StatusOr<PlannedSchedule> planned =
      PlanSchedule(Request("1f1b", 4, 8, 2, RecomputePolicy::kAuto));
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_FALSE(planned->keep_span.has_value());
  EXPECT_GT(Count(planned->recompute_stages), 0);
}

// Where keeping is as good, auto plans exactly what off plans: not one R more.
TEST(RecomputeTest, AutoKeepsEverythingWhereThatIsAsFast) {
  for (const char* name : {"zb-1p", "zb-v", "1f1b", "zb-h1"}) {
    absl::StatusOr<PlannedSchedule> off =
        PlanSchedule(Request(name, 4, 8, 4, RecomputePolicy::kOff));
    absl::StatusOr<PlannedSchedule> autoplan =
        PlanSchedule(Request(name, 4, 8, 4, RecomputePolicy::kAuto));
    ASSERT_TRUE(off.ok() && autoplan.ok()) << name;
    EXPECT_EQ(autoplan->plan, off->plan) << name;
    EXPECT_EQ(Count(autoplan->recompute_stages), 0) << name;
    EXPECT_TRUE(off->recompute_stages.empty()) << name;
  }
}

// Property: at any limit, auto is never slower than keeping everything, and its plan is valid
// (PlanSchedule validates it) within the limit.
TEST(RecomputeTest, AutoIsNeverSlowerThanKeeping) {
  for (const char* name : {"zb-1p", "zb-auto", "zb-v", "zb-h1", "1f1b"}) {
    for (double limit : {1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0}) {
      absl::StatusOr<PlannedSchedule> off =
          PlanSchedule(Request(name, 4, 8, limit, RecomputePolicy::kOff));
      absl::StatusOr<PlannedSchedule> autoplan =
          PlanSchedule(Request(name, 4, 8, limit, RecomputePolicy::kAuto));
      if (off.ok()) {
        ASSERT_TRUE(autoplan.ok()) << name << " " << limit << ": " << autoplan.status();
        EXPECT_LE(autoplan->sim.span, off->sim.span + 1e-9) << name << " " << limit;
      }
      if (!autoplan.ok()) continue;
      for (double peak : autoplan->sim.peak_memory) EXPECT_LE(peak, limit + 1e-9) << name;
    }
  }
}

TEST(RecomputeTest, AllRecomputesEveryStage) {
  absl::StatusOr<PlannedSchedule> planned =
      PlanSchedule(Request("zb-h1", 2, 4, 8, RecomputePolicy::kAll));
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(Count(planned->recompute_stages), 2);
  EXPECT_TRUE(planned->plan.IsLowered());
  int recomputes = 0;
  for (const auto& rank : planned->plan.ranks) {
    recomputes += std::count_if(rank.begin(), rank.end(), [](const Action& a) {
      return a.kind == ActionKind::kRecompute;
    });
  }
  EXPECT_EQ(recomputes, 2 * 4);
}

// The V generators refuse a backward that takes memory (R's, in the surrogate): they plan
// recomputation with B freeing nothing and room left for R's memory, and the plan still fits.
TEST(RecomputeTest, VSchedulesRecomputeWithinTheLimit) {
  absl::StatusOr<PlannedSchedule> planned =
      PlanSchedule(Request("zb-v", 4, 8, 4, RecomputePolicy::kAll));
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(Count(planned->recompute_stages), 8);
  for (double peak : planned->sim.peak_memory) EXPECT_LE(peak, 4 + 1e-9);
}

TEST(RecomputeTest, HoistingNeverLengthensAndKeepsROrder) {
  const CostModel cost = CostModel::Uniform(4, kStage);
  ScheduleRequest sreq;
  sreq.pipeline = 4;
  sreq.microbatches = 8;
  sreq.memory_limit = 2;
  sreq.cost = RecomputeSurrogate(cost, {true, true, true, true});
  absl::StatusOr<Plan> generated = GenerateSchedule(ScheduleKind::kZb1p, sreq);
  ASSERT_TRUE(generated.ok()) << generated.status();
  const Plan before = InsertRecompute(*generated, {true, true, true, true});
  const Plan after = HoistRecompute(before, cost, 2);
  EXPECT_TRUE(ValidatePlan(after, {.cost = &cost, .memory_limit = 2}).ok());
  EXPECT_LE(Simulate(after, cost)->span, Simulate(before, cost)->span);
}

TEST(RecomputeTest, NotWithTheExactSolver) {
  PlanRequest req = Request("zb-1p", 2, 4, 2, RecomputePolicy::kAuto);
  req.optimal = OptimalOptions{};
  absl::StatusOr<PlannedSchedule> planned = PlanSchedule(req);
  ASSERT_FALSE(planned.ok());
  EXPECT_EQ(ErrorField(planned.status()), "recompute");
}

TEST(RecomputeTest, PolicyNames) {
  for (auto p : {RecomputePolicy::kOff, RecomputePolicy::kAuto, RecomputePolicy::kAll}) {
    EXPECT_EQ(*ParseRecomputePolicy(RecomputePolicyName(p)), p);
  }
  EXPECT_FALSE(ParseRecomputePolicy("sometimes").ok());
}

}  // namespace
}  // namespace zpipe::core
