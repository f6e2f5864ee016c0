// Recomputation as a schedule decision: per stage, keep a microbatch's activations from its F to
// its B, or keep only the stage's input and run the forward again (an R action) before B.
//
// Activation checkpointing done inside a stage puts the recomputed forward at the start of B,
// which is on the critical path of a zero-bubble schedule. Here R is an action of its own: the
// planner places it anywhere between its F and its B on the rank, in an idle slot when there is
// one, and decides per stage whether recomputing pays at all under the memory limit:
//   - a recomputing stage's F holds mem_keep, its R adds mem_f - mem_keep (CostModel);
//   - the schedule generators know nothing of R: they plan against a surrogate cost model in
//     which a recomputing stage's F holds mem_keep and its backward takes T_R longer and first
//     takes back the rest of the memory (RecomputeSurrogate); the plan they return then gets an R
//     right before each backward of those stages (InsertRecompute), which is where the surrogate
//     charged it, and where R runs while B waits for its gradient; local moves then try each R
//     earlier (HoistRecompute; on the shapes tried none was shorter);
//   - ChooseRecompute compares the best keep-everything plan with plans that recompute some
//     stages, and recomputes only where the span gets strictly shorter (or where no plan fits
//     the memory limit without it).
#ifndef ZPIPE_CORE_RECOMPUTE_H_
#define ZPIPE_CORE_RECOMPUTE_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cost_model.h"
#include "core/plan.h"
#include "core/schedule.h"

namespace zpipe::core {

// Whether the planner may recompute: never (the default; plans as before), where it shortens the
// span or makes a plan fit (auto), or on every stage (all; for tests and forced checkpointing).
enum class RecomputePolicy { kOff, kAuto, kAll };
absl::string_view RecomputePolicyName(RecomputePolicy policy);  // "off", "auto", "all"
absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name);

// The cost model a schedule generator plans against when the stages with `recompute[s]` set
// recompute: F holds mem_keep; the backward (B or BW) takes T_R longer and first adds
// mem_f - mem_keep, with any memory B releases moved to W so that the generator's running memory
// after B is never below the real peak after R.
CostModel RecomputeSurrogate(const CostModel& cost, const std::vector<bool>& recompute);

// `plan` (compute actions only) with R(s,i) right before the B or BW of (s,i) for every stage
// with `recompute[s]` set.
Plan InsertRecompute(const Plan& plan, const std::vector<bool>& recompute);

// Per stage, whether `plan` recomputes it (has an R for any of its microbatches).
std::vector<bool> RecomputedStages(const Plan& plan);
// The stages set in `stages` (RecomputedStages, RecomputeChoice::stages), ascending: what the
// CLI and errors list.
std::vector<int> StageIndices(const std::vector<bool>& stages);

// Moves each R of a compute plan earlier on its rank (never before its F), where that shortens the
// span (or, at equal span, ends the ranks earlier) and keeps every rank's memory within `limit`.
// Bounded work: plans too large for it come back unchanged.
Plan HoistRecompute(Plan plan, const CostModel& cost, double limit);

// The planner's decision, for ChooseRecompute's caller to show.
struct RecomputeChoice {
  Plan plan;                    // compute plan; has R actions where `stages` is set
  std::vector<bool> stages;     // per stage: recomputed
  // The best plan that keeps every activation at this limit: its span and bubble, or nullopt
  // when no such plan fits (then recomputation is what makes a plan exist).
  std::optional<double> keep_span;
  std::optional<double> keep_bubble;
  double span = 0;    // of `plan`
  double bubble = 0;  // of `plan`, R counted as busy time
};

// Plans `kind` for `request` (its memory_limit set) under `policy` (kAuto or kAll). kAuto returns
// the keep-everything plan unless recomputing some stages gives a strictly shorter span; kAll
// recomputes every stage. Errors: the generator's, when no plan fits with or without
// recomputation.
absl::StatusOr<RecomputeChoice> ChooseRecompute(ScheduleKind kind, const ScheduleRequest& request,
                                                RecomputePolicy policy);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_RECOMPUTE_H_
