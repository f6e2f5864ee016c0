// Schedule generators: (p, m, cost model, memory limit) -> compute plan.
//
// Every generator returns a plan of compute actions only (F, B, W, BW); LowerComm() adds the
// communication and PlanGradSync() the reductions. A generator that cannot satisfy its
// constraints (m too small, memory limit too low, ...) returns InvalidArgument or
// FailedPrecondition with a message naming the constraint; it never returns a wrong plan.
#ifndef ZPIPE_CORE_SCHEDULE_H_
#define ZPIPE_CORE_SCHEDULE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cost_model.h"
#include "core/plan.h"

namespace zpipe::core {

enum class ScheduleKind {
  kGpipe,
  k1F1B,
  kInterleaved1F1B,
  kZbH1,
  kZbH2,
  kZb1p,    // ZB automatic with memory limit p * M_F
  kZb2p,    // ZB automatic with memory limit 2p * M_F
  kZbAuto,  // ZB automatic with a caller-chosen memory limit (default p * M_F)
  kZbV,
  kVHalf,
  kVMin,
  kDualPipeV,
};

// Names as used by the CLI and job specs: "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2",
// "zb-1p", "zb-2p", "zb-auto", "zb-v", "v-half", "v-min", "dualpipe-v".
absl::string_view ScheduleName(ScheduleKind kind);
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
const std::vector<ScheduleKind>& AllScheduleKinds();

// Whether the schedule splits backward into B and W (otherwise it uses BW).
bool SplitsBackward(ScheduleKind kind);

// Whether the schedule's generator searches (SearchOptions, below): ZB-1p, ZB-2p, zb-auto, ZB-V,
// V-Half and V-Min.
bool HasSearch(ScheduleKind kind);

// A search beyond the single greedy pass, for the schedules that have one (ZB-1p, ZB-2p, zb-auto,
// ZB-V, V-Half, V-Min; the others ignore it). The search starts from the greedy pass's plan, tries
// the rest of the generator's policy family and seeded random variants of it, then improves the
// best by local moves on the per-rank orders (fill an idle gap with a later W, move a held-up F or
// B earlier, shift an action a few places), each kept only when the plan still completes within
// the same memory limit and its span does not grow. The result is never worse than the greedy
// pass's and is the same for the same request and seed on every machine: the budget is converted
// to a fixed amount of simulation work (about `budget_seconds` of one core of the development
// machine), not read from a clock.
struct SearchOptions {
  double budget_seconds = 0;  // 0 = the greedy pass alone
  uint64_t seed = 1;
};

struct ScheduleRequest {
  int pipeline = 1;      // p
  int microbatches = 1;  // m
  int chunks = 0;        // v for interleaved (0 = default 2); ignored by other schedules
  CostModel cost;        // must have p * v stages
  // Per-rank memory limit in the cost model's memory unit; nullopt = the schedule's default.
  std::optional<double> memory_limit;
  SearchOptions search;
};

// Placement (and so v) the schedule uses for pipeline p; `chunks` only matters for interleaved.
Placement PlacementFor(ScheduleKind kind, int pipeline, int chunks = 0);

// The memory limit the schedule is defined with, per rank, from the cost model's mem_f:
// 1F1B, ZB-H1, ZB-1p: p * M_F; ZB-V: 2p * M_F (chunk-sized stages); ZB-2p: 2p * M_F;
// ZB-H2: (2p - 1) * M_F; V-Half: about half of 1F1B's; V-Min: about a third; GPipe: m * M_F.
// M_F is the largest mem_f over stages.
double DefaultMemoryLimit(ScheduleKind kind, int pipeline, int microbatches, const CostModel& cost);

absl::StatusOr<Plan> GenerateSchedule(ScheduleKind kind, const ScheduleRequest& request);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_SCHEDULE_H_
