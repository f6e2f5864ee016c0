// The plan IR: per pipeline rank, the ordered list of actions it executes in one iteration.
//
// Compute actions (F, B, W, BW, R) name a stage and a microbatch. R (recompute) runs the
// forward of (stage, microbatch) again from its kept input, after its F and before its B (or BW)
// on the same rank: a plan with R(s,i) has F(s,i) keep only its input, and R rebuilds what the
// backward needs (docs/design.md "Recomputation"). Comm lowering adds SEND_ACT /
// RECV_ACT / SEND_GRAD / RECV_GRAD, which name the *producing* stage of the tensor they carry and
// the peer rank: `SEND_ACT s3 mb7 -> r2` sends stage 3's output, `RECV_ACT s3 mb7 <- r1` receives
// it on the rank of stage 4; `SEND_GRAD s4 mb7 -> r1` sends stage 4's input gradient to stage 3.
// Grad-sync planning adds `REDUCE chunk1 bucket0`.
//
// Every plan has a text form (one action per line, plus a short header) with
// ParsePlanText(PlanToText(plan)) == plan.
#ifndef ZPIPE_CORE_PLAN_H_
#define ZPIPE_CORE_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/placement.h"

namespace zpipe::core {

enum class ActionKind : uint8_t {
  kForward,         // F
  kBackwardInput,   // B: input gradient only; weight gradients are queued
  kBackwardWeight,  // W: the queued weight gradients of (stage, microbatch)
  kBackwardFull,    // BW: B then W at once
  kSendAct,
  kRecvAct,
  kSendGrad,
  kRecvGrad,
  kReduce,
  kRecompute,  // R: the forward of (stage, microbatch) again, with the graph the backward needs
};

absl::string_view ActionKindName(ActionKind kind);  // "F", "B", "W", "BW", "R", "SEND_ACT", ...
absl::StatusOr<ActionKind> ParseActionKind(absl::string_view name);

bool IsCompute(ActionKind kind);
bool IsSend(ActionKind kind);
bool IsRecv(ActionKind kind);
inline bool IsComm(ActionKind kind) { return IsSend(kind) || IsRecv(kind); }

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;       // compute and comm actions
  int microbatch = 0;  // compute and comm actions
  int peer = -1;       // comm actions: the other rank
  int chunk = 0;       // REDUCE: local chunk on this rank
  int bucket = 0;      // REDUCE: bucket index within the chunk

  static Action F(int s, int mb) { return {ActionKind::kForward, s, mb}; }
  static Action B(int s, int mb) { return {ActionKind::kBackwardInput, s, mb}; }
  static Action W(int s, int mb) { return {ActionKind::kBackwardWeight, s, mb}; }
  static Action BW(int s, int mb) { return {ActionKind::kBackwardFull, s, mb}; }
  static Action R(int s, int mb) { return {ActionKind::kRecompute, s, mb}; }
  static Action Comm(ActionKind kind, int s, int mb, int peer) { return {kind, s, mb, peer}; }
  static Action Reduce(int chunk, int bucket) {
    Action a;
    a.kind = ActionKind::kReduce;
    a.chunk = chunk;
    a.bucket = bucket;
    return a;
  }

  friend bool operator==(const Action& a, const Action& b) = default;
};

std::string ActionToString(const Action& action);  // e.g. "F s3 mb7", "SEND_ACT s3 mb7 -> r2"

// What compute action `a` takes from a neighbouring stage: F(s-1, i) for F(s, i) with s > 0,
// B(s+1, i) for B or BW(s, i) with s + 1 < num_stages (the gradient; B stands for the
// producer's B or BW); nullopt for W, for the first F and the last B, and for non-compute actions.
std::optional<Action> NeighbourInput(const Action& a, int num_stages);
absl::StatusOr<Action> ParseAction(absl::string_view line);

struct Plan {
  std::string schedule;  // generator name, e.g. "zb-v"; informational
  Placement placement;
  int num_microbatches = 0;
  std::vector<std::vector<Action>> ranks;  // ranks[r] = ordered actions of rank r

  int num_ranks() const { return placement.num_ranks(); }
  int num_stages() const { return placement.num_stages(); }
  size_t num_actions() const;
  bool IsLowered() const;  // contains comm actions

  friend bool operator==(const Plan& a, const Plan& b) = default;
};

// Returns an empty plan shaped for `placement` (one empty action list per rank).
Plan EmptyPlan(std::string schedule, const Placement& placement, int microbatches);

// Text form:
//   zpipe-plan v1
//   schedule zb-v
//   placement v ranks 4 chunks 2 microbatches 8
//   rank 0
//   F s0 mb0
//   ...
// Blank lines and lines starting with '#' are ignored by the parser. The parser refuses a
// placement beyond the plan bounds (core/plan_limits.h), as workers parse what they are sent.
std::string PlanToText(const Plan& plan);
absl::StatusOr<Plan> ParsePlanText(absl::string_view text);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_PLAN_H_
