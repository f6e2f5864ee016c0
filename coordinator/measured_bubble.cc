#include "coordinator/measured_bubble.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/simulator.h"

namespace zpipe::coordinator {

absl::StatusOr<core::CostModel> MeasuredCostModel(const JobPlan& plan,
                                                  absl::Span<const RankStats> replica) {
  const int p = plan.plan.num_ranks();
  if (static_cast<int>(replica.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("measured costs: ", replica.size(),
                                                   " rank reports for a plan of ", p, " ranks"));
  }
  core::CostModel cost = plan.cost;
  for (int r = 0; r < p; ++r) {
    int n_f = 0, n_b = 0, n_bw = 0, n_w = 0;
    std::vector<bool> holds(cost.num_stages(), false);
    for (const core::Action& a : plan.plan.ranks[r]) {
      if (!core::IsCompute(a.kind)) continue;
      if (a.stage >= 0 && a.stage < cost.num_stages()) holds[a.stage] = true;
      switch (a.kind) {
        case core::ActionKind::kForward:
          ++n_f;
          break;
        case core::ActionKind::kBackwardInput:
          ++n_b;
          break;
        case core::ActionKind::kBackwardFull:
          ++n_bw;
          break;
        case core::ActionKind::kBackwardWeight:
          ++n_w;
          break;
        default:
          break;
      }
    }
    const RankStats& s = replica[r];
    constexpr double kMs = 1e3;
    const bool has_f = n_f > 0 && s.forward_s > 0;
    const bool has_w = n_w > 0 && s.weight_s > 0;
    const bool has_b = n_b + n_bw > 0 && s.backward_s > 0;
    const double w = has_w ? s.weight_s * kMs / n_w : 0;
    const double b = has_b ? std::max(0.0, (s.backward_s * kMs - n_bw * w) / (n_b + n_bw)) : 0;
    for (int st = 0; st < cost.num_stages(); ++st) {
      if (!holds[st]) continue;
      core::StageCost& c = cost.stages[st];
      if (has_f) c.f = s.forward_s * kMs / n_f;
      if (has_b) {
        c.b = b;
        // No W on this rank: every backward was fused, so backward_s already holds the W part.
        c.w = n_w > 0 ? (has_w ? w : c.w) : 0;
      } else if (has_w) {
        c.w = w;
      }
    }
  }
  return cost;
}

absl::StatusOr<PredictedBubble> PredictBubbleAtMeasuredCosts(const JobPlan& plan,
                                                             absl::Span<const RankStats> ranks) {
  const int p = plan.plan.num_ranks();
  if (p == 0 || ranks.empty() || ranks.size() % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat("measured costs: ", ranks.size(),
                                                   " rank reports for a plan of ", p, " ranks"));
  }
  const int d = static_cast<int>(ranks.size()) / p;
  int reduces = 0;
  for (const auto& actions : plan.plan.ranks) {
    for (const core::Action& a : actions) reduces += a.kind == core::ActionKind::kReduce;
  }
  PredictedBubble out;
  out.ranks.resize(ranks.size(), 0);
  double busy = 0, span = 0;
  for (int dr = 0; dr < d; ++dr) {
    absl::Span<const RankStats> replica = ranks.subspan(static_cast<size_t>(dr) * p, p);
    absl::StatusOr<core::CostModel> cost = MeasuredCostModel(plan, replica);
    if (!cost.ok()) return cost.status();
    core::SimOptions opts;
    double reduce_s = 0;
    for (const RankStats& s : replica) reduce_s += s.reduce_s;
    opts.reduce_cost = reduces > 0 ? reduce_s * 1e3 / reduces : 0;
    opts.release_during_w = plan.overlap;
    absl::StatusOr<core::SimResult> sim = core::Simulate(plan.plan, *cost, opts);
    if (!sim.ok()) return sim.status();
    for (int r = 0; r < p; ++r) {
      out.ranks[static_cast<size_t>(dr) * p + r] = sim->rank_bubble[r];
      busy += sim->busy[r];
    }
    span = std::max(span, sim->span);
  }
  out.job = span > 0 ? std::max(0.0, 1.0 - busy / (static_cast<double>(p) * d * span)) : 0;
  return out;
}

}  // namespace zpipe::coordinator
