// Planner: turns a validated JobSpec into the plan every rank executes, with its cost model and
// predicted statistics.
//
// The planner supplies what is job-specific: the cost model (synthetic: from the *_ms fields;
// GPT: FLOP-proportional, per stage by its layers; TorchScript: measured per stage), the gradient
// buckets and the reduce time; core::PlanSchedule (core/planning.h) does the rest (generate,
// validate, lower, grad-sync plan, simulate), with the search and polish `zpipe plan` runs
// (schedule.search_budget, default 1 s as for `zpipe plan --budget`; seed 1; schedule.polish,
// default true). Times are in
// milliseconds; memory in M_F units (one rank's share of one microbatch's activations; a stage
// holds 1/v of it). The plan is deterministic in the spec and its costs (the search budget is
// simulation work, not a clock), so it is regenerated rather than stored. Planning takes up to
// the search budget of one core: call PlanJob with no lock held.
#ifndef ZPIPE_COORDINATOR_PLANNER_H_
#define ZPIPE_COORDINATOR_PLANNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "core/cost_model.h"
#include "core/grad_sync.h"
#include "core/plan.h"
#include "core/simulator.h"

namespace zpipe::coordinator {

struct StageInfo {
  double activation_kb = 0;  // output activation per microbatch
  double params_mb = 0;
};

struct JobPlan {
  core::Plan plan;       // lowered, with REDUCE actions
  std::string text;      // core::PlanToText(plan)
  core::CostModel cost;  // what the plan was generated and simulated from
  // The model's own costs (spec or profile): what synthetic stages run (Assignment.stage_costs).
  // Equal to `cost` except for a plan re-made from measured costs.
  core::CostModel model_cost;
  int version = 0;  // JobRecord::plan_version
  std::vector<StageInfo> stages;
  std::vector<core::BucketPlan> buckets;  // all ranks
  double bucket_size_mb = 0;
  // grad_sync.overlap: buckets launch as their last gradient lands, during the last W (the
  // simulations use core::SimOptions::release_during_w); false = all at the iteration's end.
  bool overlap = true;
  double memory_limit = 0;  // resolved, M_F units
  core::SimResult sim;
};

// `spec` must have passed ValidateSpecFields. Errors core attributes to a request field
// (core::ErrorField) become InvalidArgument naming the spec field ("spec.batch.microbatches: ...",
// "spec.schedule.memory_limit: ...", "spec.schedule.kind: ..." for a default memory limit the
// schedule cannot meet, "spec.model: ..." for derived costs); a plan core itself rejects is
// Internal (a bug, not a user error).
// `layout`: a TorchScript model's measured stage costs (ModelLayout::stages with times); the
// plan is then generated and simulated from them instead of unit costs.
// `costs`: per-stage compute costs to generate the plan from instead (a re-plan from measured
// costs; JobRecord::plan_costs); ignored unless there is one per stage. `version` is stored on
// the plan.
absl::StatusOr<std::shared_ptr<const JobPlan>> PlanJob(const JobSpec& spec,
                                                       const ModelLayout* layout = nullptr,
                                                       absl::Span<const PlanStageCost> costs = {},
                                                       int version = 0);

// The cost model alone (exposed for tests).
core::CostModel CostModelFor(const JobSpec& spec, int num_stages, int chunks_per_rank);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_PLANNER_H_
