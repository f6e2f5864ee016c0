// One planning pipeline: everything that turns a schedule name, a pipeline shape and costs into
// the plan ranks execute, with its predicted statistics. The coordinator's planner, `zpipe plan`,
// the benches and the executor's test harness all plan through PlanSchedule, so the chain below
// is written once:
//
//   parse the schedule kind -> check the bounds (core/plan_limits.h) -> placement -> the caller's
//   placement-dependent inputs (costs, buckets) and their bounds -> memory limit ->
//   GenerateSchedule (with a recompute policy: ChooseRecompute, core/recompute.h) -> ValidatePlan
//   -> polish (with a search budget: the exact solver for a node budget, PlanRequest::polish)
//   -> ValidatePlan -> LowerComm -> PlanGradSync -> ValidatePlan -> Simulate
//
// Every error the request can cause names the request field it came from (core::ErrorField on
// the status: "schedule", "pipeline", "microbatches", "chunks", "memory_limit",
// "cost.stages[3].f", "cost.comm", "buckets_per_stage", "reduce_cost", "recompute"), so that the adapters
// at the edges map it to their own names (a job spec path, a CLI flag) without reading messages.
// Such errors are InvalidArgument or FailedPrecondition (a shape the schedule cannot serve),
// Unimplemented (a schedule this build lacks); a plan core itself rejects after generating it is
// Internal, with no field: a bug, not the request's fault.
#ifndef ZPIPE_CORE_PLANNING_H_
#define ZPIPE_CORE_PLANNING_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/grad_sync.h"
#include "core/optimal_schedule.h"
#include "core/placement.h"
#include "core/plan.h"
#include "core/recompute.h"
#include "core/schedule.h"
#include "core/simulator.h"

namespace zpipe::core {

// What depends on the placement the schedule picks (S = p * v stages): the caller builds it
// once the shape is known.
struct PlanInputs {
  CostModel cost;             // S stages; times >= 0, every value finite, |x| <= kMaxCostValue
  int buckets_per_stage = 0;  // gradient buckets per stage; 0 = no grad-sync planning
  double reduce_cost = 0;     // duration of one REDUCE in the simulation
};

struct PlanRequest {
  std::string schedule;  // "zb-v", ... (ParseScheduleKind)
  int pipeline = 0;      // p
  int microbatches = 0;  // m
  int chunks = 0;        // v for interleaved (0 = 2); 0 for every other schedule
  // Per-rank memory limit in the cost model's memory unit; nullopt = the schedule's default.
  std::optional<double> memory_limit;
  // Called once, with the schedule's placement, after the shape passed its bounds. Required.
  std::function<PlanInputs(const Placement&)> inputs;
  bool lower = true;     // insert SEND/RECV (LowerComm)
  bool overlap = true;   // grad sync: launch each bucket as its last gradient lands (else at end)
  bool validate = true;  // validate the compute plan and the final plan (benches may skip it)
  // Search beyond the greedy pass (core/schedule.h); the default is the greedy pass alone.
  SearchOptions search;
  // With a search budget (> 0), every schedule but gpipe, no recompute policy and at most
  // kMaxPolishActions compute actions: after generating (and searching), the exact solver
  // (core/optimal_schedule.h) runs from the generated plan for PolishNodes(budget, actions) tree
  // nodes (a node budget, not a clock: the same plan on every machine), and its plan replaces the
  // generated one when it is strictly shorter. Its depth-first search, timed action by action,
  // often finds in a few passes what the generators' orders miss (1F1B and ZB-H1 at m = p fill
  // the middle ranks' warm-up deeper within the same memory limit). gpipe stays the textbook
  // all-forwards-then-all-backwards baseline. false = the generated plan (what jobs planned
  // before the polish run: coordinator's schedule.polish).
  bool polish = true;
  // Set: after generating (searching and polishing), run the exact solver
  // (core/optimal_schedule.h) with that plan as the incumbent; its plan replaces it and goes
  // through the rest of the chain (validate, lower, grad sync, simulate) like any other.
  std::optional<OptimalOptions> optimal;
  // Whether stages may recompute their forward before B instead of keeping activations
  // (core/recompute.h). kOff plans exactly as before; kAuto recomputes where that shortens the
  // span at the memory limit or makes a plan fit it at all. Not with `optimal` (the solver does
  // not model R).
  RecomputePolicy recompute = RecomputePolicy::kOff;
};

struct PlannedSchedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  Plan plan;  // lowered when `lower`, with REDUCE actions when there are buckets
  CostModel cost;
  double memory_limit = 0;          // resolved
  std::vector<BucketPlan> buckets;  // all ranks; empty without buckets
  SimResult sim;                    // of `plan`, with the request's reduce cost and overlap
  double generate_seconds = 0;      // GenerateSchedule alone
  // The larger of SpanLowerBound (core/span_bound.h) and RankRootBound (core/rank_bound.h: each
  // rank's relaxation at its first state, no search) for the shape and memory limit, and the
  // bubble rate at that span: sim.bubble_rate - bubble_lower_bound is what any search could still
  // gain. With a recompute policy, also over plans that recompute (a weaker bound: they hold
  // less).
  // With `optimal`, the larger of that and the solver's proven bound.
  double span_lower_bound = 0;
  double bubble_lower_bound = 0;
  // With PlanRequest::optimal: the solver's result (its `plan` is the compute plan; its
  // `incumbent_span` the generated plan's span, searched and polished, so the generator's
  // distance to the optimum is incumbent_span / bound - 1). The simulated span of `plan` equals
  // its `span` unless reductions (buckets with a reduce cost) lengthen it, which the solver does
  // not model.
  std::optional<OptimalResult> optimal;
  // Set when the polish ran (PlanRequest::polish): the generated plan's span, the polished one's
  // (equal when the solver found nothing shorter) and the tree nodes it took.
  struct Polish {
    double generated_span = 0;
    double span = 0;
    int64_t nodes = 0;
    bool improved() const { return span < generated_span; }
  };
  std::optional<Polish> polish;
  // Per stage, whether the plan recomputes it; empty with RecomputePolicy::kOff.
  std::vector<bool> recompute_stages;
  // With a recompute policy: the best keep-everything plan's span and bubble at this limit
  // (compute plan, no reductions), nullopt when none fits; and the same for the chosen plan,
  // so that callers can say what recomputation bought.
  std::optional<double> keep_span, keep_bubble;
  double compute_span = 0, compute_bubble = 0;
};

// Runs the chain above. Deterministic in the request (generate_seconds aside). Thread-safe.
absl::StatusOr<PlannedSchedule> PlanSchedule(const PlanRequest& request);

// The checks PlanSchedule makes before generating (the schedule name, the bounds of the shape
// and of the inputs), alone: cheap, for callers that check several requests before planning any.
absl::Status CheckPlanRequest(const PlanRequest& request);

// The polish's limits. Each tree node costs about one pass over the plan's compute actions
// (7-20 ns per action on the development machine), and one depth-first pass from the root to a
// complete plan is `actions` nodes, so a pass costs about actions^2 of that. Per second of
// search budget the polish gets kPolishWork node-actions (about 5 ms), and at least 2 passes
// (one for each of the solver's phases); plans of more than kMaxPolishActions compute actions,
// where 2 passes exceed kPolishWork, are not polished (ZB-2p at p = 8, m = 32 has 768 and one
// pass there takes ~8 ms; at p = 32, m = 256, 24576 actions, seconds). Plans of at most
// kPolishRelaxationActions also have the tree ask the ranks' relaxations at its nodes
// (OptimalOptions::rank_relaxation_at_nodes), which costs about as much again.
inline constexpr int64_t kMaxPolishActions = 512;
inline constexpr int64_t kPolishRelaxationActions = 192;
inline constexpr double kPolishWork = 2.0 * kMaxPolishActions * kMaxPolishActions;
// Tree nodes for a search budget and a plan of `actions` compute actions (above); 0 = no polish
// (no budget, or more than kMaxPolishActions actions).
int64_t PolishNodes(double budget_seconds, int64_t actions);
// On plans of at most kPolishRelaxationActions of the schedules that search (HasSearch), the
// polish also spends kPolishNeighbourhoodWork node-actions per second of budget on
// neighbourhood rounds (OptimalOptions::neighbourhood_nodes; with the relaxations at the nodes,
// about half a second) when its plain search did not finish: V-Half at p = 4, m = 8, T_comm 0.1,
// searched to 55.4 with seed 1, is polished to 55.2 (the optimum is 54.8; without the rounds it
// stayed at 55.4, 1.1% above). 1F1B and ZB-H1 have no search and stay milliseconds.
inline constexpr double kPolishNeighbourhoodWork = 2e7;
// Neighbourhood nodes for a search budget and a plan of `actions` compute actions; 0 above
// kPolishRelaxationActions or without a budget.
int64_t PolishNeighbourhoodNodes(double budget_seconds, int64_t actions);

// PlanInputs with the same `stage` cost for each of the placement's stages.
PlanInputs UniformInputs(const Placement& placement, const StageCost& stage, double comm = 0,
                         int buckets_per_stage = 0, double reduce_cost = 0);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_PLANNING_H_
