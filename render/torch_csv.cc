#include "render/torch_csv.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::render {

using core::Action;
using core::ActionKind;
using core::ActionToString;
using core::IsCompute;
using core::Plan;

namespace {

// PyTorch's _ComputationType letter for a compute kind.
absl::string_view TorchKind(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kBackwardFull:
      return "B";
    default:
      return "";
  }
}

}  // namespace

absl::StatusOr<std::string> PlanToTorchCsv(const Plan& plan) {
  if (static_cast<int>(plan.ranks.size()) != plan.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan has ", plan.ranks.size(),
                                                   " action lists for a placement of ",
                                                   plan.num_ranks(), " ranks"));
  }
  std::string out;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    bool first = true;
    for (const Action& a : plan.ranks[r]) {
      if (a.kind == ActionKind::kReduce) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", r, " has ", ActionToString(a),
            "; PyTorch's runtime reduces each stage's gradients once, after its last backward, "
            "and cannot run per-bucket reductions: plan without --buckets"));
      }
      if (a.kind == ActionKind::kRecompute) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", r, " has ", ActionToString(a),
            "; PyTorch's schedule CSV has no recompute action (its activation checkpointing runs "
            "the forward again inside the backward, where this plan's timing does not put it): "
            "plan with --recompute off"));
      }
      if (!IsCompute(a.kind)) continue;  // PyTorch inserts its own SEND/RECV
      if (a.stage < 0 || a.stage >= plan.num_stages() || plan.placement.RankOf(a.stage) != r) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", r, " has ", ActionToString(a), ", a stage the placement does not put on rank ",
            r, "; PyTorch runs every stage on the one rank its placement names"));
      }
      absl::StrAppend(&out, first ? "" : ",", a.stage, TorchKind(a.kind), a.microbatch);
      first = false;
    }
    out += '\n';
  }
  return out;
}

}  // namespace zpipe::render
