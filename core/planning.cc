#include "core/planning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/number_format.h"
#include "core/plan_limits.h"
#include "core/rank_bound.h"
#include "core/span_bound.h"
#include "core/status_field.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(message), field);
}

// `value` is finite, at most kMaxCostValue in absolute value, and (with `non_negative`) >= 0.
absl::Status CheckValue(absl::string_view field, double value, bool non_negative) {
  if (!std::isfinite(value)) {
    return Bad(field, absl::StrCat("must be a finite number, got ", PlainNumber(value)));
  }
  if (std::fabs(value) > kMaxCostValue) {
    return Bad(field, absl::StrCat("must be at most ", PlainNumber(kMaxCostValue),
                                   " in absolute value (the cost value limit), got ", value));
  }
  if (non_negative && value < 0) return Bad(field, absl::StrCat("must be >= 0, got ", value));
  return absl::OkStatus();
}

// The bounds of the shape alone, before anything is built.
absl::Status CheckShape(const PlanRequest& req, ScheduleKind kind) {
  if (req.pipeline < 1 || req.pipeline > kMaxPipeline) {
    return Bad("pipeline", absl::StrCat("must be in [1, ", kMaxPipeline,
                                        "] (the pipeline limit), got ", req.pipeline));
  }
  if (req.microbatches < 1 || req.microbatches > kMaxMicrobatches) {
    return Bad("microbatches", absl::StrCat("must be in [1, ", kMaxMicrobatches,
                                            "] (the microbatch limit), got ", req.microbatches));
  }
  if (req.chunks < 0 || req.chunks > kMaxChunks) {
    return Bad("chunks", absl::StrCat("must be in [0, ", kMaxChunks, "] (the chunk limit), got ",
                                      req.chunks));
  }
  if (kind == ScheduleKind::kInterleaved1F1B && req.chunks == 1) {
    return Bad("chunks", "interleaved needs chunks >= 2 (or 0 for 2)");
  }
  const int v = PlacementFor(kind, req.pipeline, req.chunks).chunks_per_rank();
  const int64_t stages = int64_t{req.pipeline} * v;
  if (stages * req.microbatches > kMaxStageMicrobatches) {
    return Bad("microbatches",
               absl::StrCat(ScheduleName(kind), " has pipeline x chunks = ", req.pipeline, " x ", v,
                            ", times ", req.microbatches, " microbatches = ",
                            stages * req.microbatches, " exceeds ", kMaxStageMicrobatches,
                            " (the plan size limit); use fewer microbatches or ranks"));
  }
  if (req.memory_limit.has_value()) {
    if (absl::Status st = CheckValue("memory_limit", *req.memory_limit, true); !st.ok()) return st;
    if (*req.memory_limit <= 0) return Bad("memory_limit", "must be > 0");
  }
  if (req.recompute != RecomputePolicy::kOff && req.optimal.has_value()) {
    return Bad("recompute",
               "the exact solver does not model recomputation; use recompute off with optimal");
  }
  const double budget = req.search.budget_seconds;
  if (!std::isfinite(budget) || budget < 0 || budget > kMaxSearchSeconds) {
    return Bad("search.budget",
               absl::StrCat("must be a number of seconds in [0, ", PlainNumber(kMaxSearchSeconds),
                            "] (the search budget limit), got ", PlainNumber(budget)));
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const PlanInputs& in, ScheduleKind kind, const Placement& placement) {
  const int stages = placement.num_stages();
  if (in.cost.num_stages() != stages) {
    return Bad("cost", absl::StrCat("has ", in.cost.num_stages(), " stages; the placement has ",
                                    stages, " (pipeline x chunks)"));
  }
  for (int s = 0; s < stages; ++s) {
    const StageCost& c = in.cost.stages[s];
    const std::string at = absl::StrCat("cost.stages[", s, "].");
    for (const auto& [name, value, non_negative] :
         {std::tuple{"f", c.f, true}, std::tuple{"b", c.b, true}, std::tuple{"w", c.w, true},
          std::tuple{"mem_f", c.mem_f, false}, std::tuple{"mem_b", c.mem_b, false},
          std::tuple{"mem_w", c.mem_w, false}, std::tuple{"r", c.r, false},
          std::tuple{"mem_keep", c.mem_keep, false}}) {
      if (absl::Status st = CheckValue(absl::StrCat(at, name), value, non_negative); !st.ok()) {
        return st;
      }
    }
  }
  if (absl::Status st = CheckValue("cost.comm", in.cost.comm, true); !st.ok()) return st;
  if (in.buckets_per_stage < 0 || in.buckets_per_stage > kMaxBucketsPerStage) {
    return Bad("buckets_per_stage",
               absl::StrCat("must be in [0, ", kMaxBucketsPerStage,
                            "] (the per-stage bucket limit), got ", in.buckets_per_stage));
  }
  if (int64_t{stages} * in.buckets_per_stage > kMaxStageBuckets) {
    return Bad("buckets_per_stage",
               absl::StrCat(ScheduleName(kind), " has pipeline x chunks = ", placement.num_ranks(),
                            " x ", placement.chunks_per_rank(), ", times ", in.buckets_per_stage,
                            " buckets = ", int64_t{stages} * in.buckets_per_stage, " exceeds ",
                            kMaxStageBuckets, " (the grad-sync bucket limit); use fewer buckets"));
  }
  return CheckValue("reduce_cost", in.reduce_cost, true);
}

absl::Status Internal(absl::string_view step, const absl::Status& st) {
  return absl::InternalError(absl::StrCat("planning: ", step, ": ", st.message()));
}

// GenerateSchedule, or with a recompute policy ChooseRecompute (the memory limit resolved), with
// what it decided recorded on `out`.
absl::StatusOr<Plan> GenerateComputePlan(ScheduleKind kind, ScheduleRequest sreq,
                                         RecomputePolicy policy, PlannedSchedule& out) {
  if (policy == RecomputePolicy::kOff) return GenerateSchedule(kind, sreq);
  sreq.memory_limit = out.memory_limit;
  absl::StatusOr<RecomputeChoice> choice = ChooseRecompute(kind, sreq, policy);
  if (!choice.ok()) return choice.status();
  out.recompute_stages = std::move(choice->stages);
  out.keep_span = choice->keep_span;
  out.keep_bubble = choice->keep_bubble;
  out.compute_span = choice->span;
  out.compute_bubble = choice->bubble;
  return std::move(choice->plan);
}

// With recomputation allowed, a plan may beat SpanLowerBound of the keep-everything memory model,
// which charges each held microbatch all of mem_f. Every plan, recomputing or not, holds at least
// mem_keep from F to B and mem_f + mem_b from B to W, and busy time at least f + b + w: the bound
// of that memory model, with the keep-everything one, bounds them all. The bubble bound is at the
// plan's own busy time (R included), as BubbleLowerBound's is for plans without R.
void BoundRecomputingPlan(const Placement& placement, int microbatches, bool split_backward,
                          PlannedSchedule& out) {
  CostModel light = out.cost;
  for (StageCost& c : light.stages) {
    const double held = std::min(c.mem_f, c.mem_keep);
    c.mem_b += c.mem_f - held;
    c.mem_f = held;
  }
  out.span_lower_bound =
      std::min(out.span_lower_bound, SpanLowerBound(placement, microbatches, light,
                                                    out.memory_limit, split_backward));
  double busy = 0;
  for (double b : out.sim.busy) busy += b;
  const double p = placement.num_ranks();
  // R is busy time the bound's work does not count: at a weak bound this is below 0, and 0 says
  // as much as it can.
  out.bubble_lower_bound =
      out.span_lower_bound > 0 ? std::max(0.0, 1 - busy / (p * out.span_lower_bound)) : 0;
}

// The polish (PlanRequest::polish) of the compute plan `out.plan`, in place; `out.polish` says
// whether it ran and what it found.
absl::Status Polish(const PlanRequest& req, ScheduleKind kind, PlannedSchedule& out) {
  if (!req.polish || kind == ScheduleKind::kGpipe || req.recompute != RecomputePolicy::kOff) {
    return absl::OkStatus();
  }
  const int64_t actions = static_cast<int64_t>(out.plan.num_actions());
  const int64_t nodes = PolishNodes(req.search.budget_seconds, actions);
  if (nodes == 0) return absl::OkStatus();
  // Neighbourhood rounds only where the generator searched: the budget is spent there anyway,
  // and the published orders of 1F1B and ZB-H1 stay milliseconds.
  const int64_t neighbourhood_nodes =
      HasSearch(kind) ? PolishNeighbourhoodNodes(req.search.budget_seconds, actions) : 0;
  absl::StatusOr<OptimalResult> solved =
      SolveOptimal(out.plan, out.cost, out.memory_limit,
                   // The relaxations at the nodes cost time per node, but their bounds lead
                   // the deepening to shorter plans where the generated one is not optimal
                   // (skewed V-Half p = 4, m = 4, T_comm 0.3, a plan of 36.38: 547 nodes reach
                   // 36.34 with them and nothing without; ctest PlanningTest.PolishAsks...).
                   // On larger plans they would cost several times the tree itself.
                   OptimalOptions{.time_limit_seconds = 0,
                                  .node_limit = nodes,
                                  .rank_relaxation_at_nodes =
                                      actions <= kPolishRelaxationActions,
                                  .neighbourhood_nodes = neighbourhood_nodes});
  if (!solved.ok()) return solved.status();
  out.polish = PlannedSchedule::Polish{
      .generated_span = solved->incumbent_span, .span = solved->span, .nodes = solved->nodes};
  if (solved->improved) out.plan = std::move(solved->plan);
  return absl::OkStatus();
}

}  // namespace

int64_t PolishNodes(double budget_seconds, int64_t actions) {
  if (!(budget_seconds > 0) || actions <= 0 || actions > kMaxPolishActions) return 0;
  const double a = static_cast<double>(actions);
  const double per_second = kPolishWork / a;
  const double nodes = std::min(budget_seconds, kMaxSearchSeconds) * per_second;
  return static_cast<int64_t>(std::ceil(std::max(2 * a, nodes)));
}

int64_t PolishNeighbourhoodNodes(double budget_seconds, int64_t actions) {
  if (!(budget_seconds > 0) || actions <= 0 || actions > kPolishRelaxationActions) return 0;
  return static_cast<int64_t>(std::ceil(std::min(budget_seconds, kMaxSearchSeconds) *
                                        kPolishNeighbourhoodWork / static_cast<double>(actions)));
}

PlanInputs UniformInputs(const Placement& placement, const StageCost& stage, double comm,
                         int buckets_per_stage, double reduce_cost) {
  return {CostModel::Uniform(placement.num_stages(), stage, comm), buckets_per_stage, reduce_cost};
}

absl::Status CheckPlanRequest(const PlanRequest& req) {
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(req.schedule);
  if (!kind.ok()) return WithField(kind.status(), "schedule");
  if (absl::Status st = CheckShape(req, *kind); !st.ok()) return st;
  if (!req.inputs) return Bad("cost", "no inputs for the placement were given");
  const Placement placement = PlacementFor(*kind, req.pipeline, req.chunks);
  return CheckInputs(req.inputs(placement), *kind, placement);
}

absl::StatusOr<PlannedSchedule> PlanSchedule(const PlanRequest& req) {
  if (absl::Status st = CheckPlanRequest(req); !st.ok()) return st;
  const ScheduleKind kind = *ParseScheduleKind(req.schedule);
  const Placement placement = PlacementFor(kind, req.pipeline, req.chunks);
  const PlanInputs inputs = req.inputs(placement);

  PlannedSchedule out;
  out.kind = kind;
  out.cost = inputs.cost;
  out.memory_limit =
      req.memory_limit.value_or(DefaultMemoryLimit(kind, req.pipeline, req.microbatches, out.cost));
  ScheduleRequest sreq;
  sreq.pipeline = req.pipeline;
  sreq.microbatches = req.microbatches;
  sreq.chunks = req.chunks;
  sreq.cost = out.cost;
  sreq.memory_limit = req.memory_limit;
  sreq.search = req.search;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Plan> plan = GenerateComputePlan(kind, sreq, req.recompute, out);
  out.generate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!plan.ok()) {
    // The generators name the field of what they cannot serve; anything else is the schedule's.
    if (ErrorField(plan.status()).empty()) return WithField(plan.status(), "schedule");
    return plan.status();
  }
  const ValidateOptions vopts{.cost = &out.cost, .memory_limit = out.memory_limit};
  if (req.validate) {
    if (absl::Status st = ValidatePlan(*plan, vopts); !st.ok()) {
      return Internal("generated plan invalid", st);
    }
  }
  out.plan = *std::move(plan);
  if (absl::Status st = Polish(req, kind, out); !st.ok()) return Internal("polish", st);
  if (out.polish.has_value() && out.polish->improved() && req.validate) {
    if (absl::Status st = ValidatePlan(out.plan, vopts); !st.ok()) {
      return Internal("polished plan invalid", st);
    }
  }
  if (req.optimal.has_value()) {
    absl::StatusOr<OptimalResult> solved =
        SolveOptimal(out.plan, out.cost, out.memory_limit, *req.optimal);
    if (!solved.ok()) return Internal("optimal solver", solved.status());
    out.plan = solved->plan;
    out.optimal = *std::move(solved);
    if (req.validate) {
      if (absl::Status st = ValidatePlan(out.plan, vopts); !st.ok()) {
        return Internal("optimal plan invalid", st);
      }
    }
  }
  if (req.lower) {
    absl::StatusOr<Plan> lowered = LowerComm(out.plan);
    if (!lowered.ok()) return Internal("comm lowering", lowered.status());
    out.plan = *std::move(lowered);
  }
  if (inputs.buckets_per_stage > 0) {
    absl::StatusOr<GradSyncPlan> synced = PlanGradSync(
        out.plan, GradSyncLayout::Uniform(placement.num_stages(), inputs.buckets_per_stage),
        req.overlap);
    if (!synced.ok()) return Internal("grad-sync planning", synced.status());
    out.plan = std::move(synced->plan);
    out.buckets = std::move(synced->buckets);
  }
  if (req.validate && (req.lower || inputs.buckets_per_stage > 0)) {
    if (absl::Status st = ValidatePlan(out.plan, vopts); !st.ok()) {
      return Internal("final plan invalid", st);
    }
  }
  SimOptions sopts;
  sopts.reduce_cost = inputs.reduce_cost;
  sopts.release_during_w = req.overlap;
  absl::StatusOr<SimResult> sim = Simulate(out.plan, out.cost, sopts);
  if (!sim.ok()) return Internal("simulation", sim.status());
  out.sim = *std::move(sim);
  // The closed forms, and each rank's (and chain's) relaxation at its first state, no search;
  // the solver's bound starts from both.
  out.span_lower_bound =
      out.optimal.has_value()
          ? out.optimal->bound
          : std::max(SpanLowerBound(placement, req.microbatches, out.cost, out.memory_limit,
                                    SplitsBackward(kind)),
                     RankRootBound(placement, req.microbatches, out.cost, out.memory_limit,
                                   SplitsBackward(kind)));
  out.bubble_lower_bound =
      BubbleLowerBound(placement, req.microbatches, out.cost, out.span_lower_bound);
  if (req.recompute != RecomputePolicy::kOff) {
    BoundRecomputingPlan(placement, req.microbatches, SplitsBackward(kind), out);
  }
  return out;
}

}  // namespace zpipe::core
