#include "core/cost_model.h"

#include "absl/strings/str_cat.h"

namespace zpipe::core {

CostModel CostModel::Uniform(int num_stages, const StageCost& cost, double comm) {
  CostModel model;
  model.stages.assign(num_stages, cost);
  model.comm = comm;
  return model;
}

double CostModel::Duration(const Action& a) const {
  const StageCost& c = stages[a.stage];
  switch (a.kind) {
    case ActionKind::kForward:
      return c.f;
    case ActionKind::kBackwardInput:
      return c.b;
    case ActionKind::kBackwardWeight:
      return c.w;
    case ActionKind::kBackwardFull:
      return c.b + c.w;
    case ActionKind::kRecompute:
      return c.RecomputeTime();
    default:
      return 0;
  }
}

double CostModel::MemoryDelta(const Action& a, bool recomputed) const {
  const StageCost& c = stages[a.stage];
  switch (a.kind) {
    case ActionKind::kForward:
      return recomputed ? c.mem_keep : c.mem_f;
    case ActionKind::kRecompute:
      return c.mem_f - c.mem_keep;
    case ActionKind::kBackwardInput:
      return c.mem_b;
    case ActionKind::kBackwardWeight:
      return c.mem_w;
    case ActionKind::kBackwardFull:
      return c.mem_b + c.mem_w;
    default:
      return 0;
  }
}

double CostModel::TotalPerMicrobatch() const {
  double total = 0;
  for (const auto& c : stages) total += c.f + c.b + c.w;
  return total;
}

absl::Status CostModel::Check(int num_stages) const {
  if (static_cast<int>(stages.size()) != num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model has ", stages.size(), " stages, the plan needs ", num_stages));
  }
  if (comm < 0) return absl::InvalidArgumentError("cost model: comm time must be >= 0");
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageCost& c = stages[s];
    if (c.f < 0 || c.b < 0 || c.w < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model: stage ", s, " has a negative compute time"));
    }
  }
  return absl::OkStatus();
}

}  // namespace zpipe::core
