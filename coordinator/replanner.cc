#include "coordinator/replanner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "coordinator/measured_bubble.h"
#include "core/simulator.h"

namespace zpipe::coordinator {
namespace {

// The plan's bubble with `cost` and each REDUCE taking `reduce_ms`.
absl::StatusOr<double> BubbleAt(const JobPlan& plan, const core::CostModel& cost,
                                double reduce_ms) {
  core::SimOptions opts;
  opts.reduce_cost = reduce_ms;
  opts.release_during_w = plan.overlap;
  absl::StatusOr<core::SimResult> sim = core::Simulate(plan.plan, cost, opts);
  if (!sim.ok()) return sim.status();
  return sim->bubble_rate;
}

int CountReduces(const core::Plan& plan) {
  int n = 0;
  for (const auto& actions : plan.ranks) {
    for (const core::Action& a : actions) n += a.kind == core::ActionKind::kReduce;
  }
  return n;
}

}  // namespace

bool AddToWindow(ReplanWindow& window, const IterationSummary& summary, int plan_version) {
  if (summary.ranks.empty()) return false;
  for (const RankStats& r : summary.ranks) {
    if (r.plan_version != plan_version) return false;
  }
  if (window.sums.size() != summary.ranks.size()) {
    window = ReplanWindow{};
    window.sums.resize(summary.ranks.size());
  }
  for (size_t g = 0; g < summary.ranks.size(); ++g) {
    const RankStats& r = summary.ranks[g];
    RankStats& s = window.sums[g];
    s.pipeline_rank = r.pipeline_rank;
    s.data_rank = r.data_rank;
    s.forward_s += r.forward_s;
    s.backward_s += r.backward_s;
    s.weight_s += r.weight_s;
    s.reduce_s += r.reduce_s;
    s.busy_s += r.busy_s;
    s.duration_s += r.duration_s;
  }
  if (window.iterations == 0) window.first_iteration = summary.iteration;
  window.last_iteration = summary.iteration;
  ++window.iterations;
  return true;
}

absl::StatusOr<ReplanProposal> ProposeReplan(const JobSpec& spec, const JobPlan& current,
                                             const ReplanWindow& window,
                                             const ModelLayout* layout) {
  const int p = current.plan.num_ranks();
  if (window.iterations <= 0 || p == 0 || window.sums.empty() || window.sums.size() % p != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("re-plan: ", window.sums.size(), " rank measurements for a plan of ", p,
                     " ranks over ", window.iterations, " iterations"));
  }
  std::vector<RankStats> mean = window.sums;
  for (RankStats& s : mean) {
    s.forward_s /= window.iterations;
    s.backward_s /= window.iterations;
    s.weight_s /= window.iterations;
    s.reduce_s /= window.iterations;
  }
  // Per replica, then averaged: every replica runs the same plan.
  const int d = static_cast<int>(mean.size()) / p;
  const int reduces = CountReduces(current.plan);
  core::CostModel measured = current.cost;
  for (core::StageCost& c : measured.stages) c.f = c.b = c.w = 0;
  double reduce_ms = 0;
  for (int dr = 0; dr < d; ++dr) {
    absl::StatusOr<core::CostModel> cost = MeasuredCostModel(
        current, absl::Span<const RankStats>(mean).subspan(static_cast<size_t>(dr) * p, p));
    if (!cost.ok()) return cost.status();
    for (int s = 0; s < measured.num_stages(); ++s) {
      measured.stages[s].f += cost->stages[s].f / d;
      measured.stages[s].b += cost->stages[s].b / d;
      measured.stages[s].w += cost->stages[s].w / d;
    }
    double replica_reduce_s = 0;
    for (int r = 0; r < p; ++r) replica_reduce_s += mean[static_cast<size_t>(dr) * p + r].reduce_s;
    if (reduces > 0) reduce_ms += replica_reduce_s * 1e3 / reduces / d;
  }
  ReplanProposal out;
  double sum_old[3] = {0, 0, 0}, sum_new[3] = {0, 0, 0};
  for (int s = 0; s < measured.num_stages(); ++s) {
    const core::StageCost& c = measured.stages[s];
    // Planning bounds: times > 0 for F and B (1 us floor, like profiled costs).
    out.costs.push_back(
        PlanStageCost{s, std::max(c.f, 1e-3), std::max(c.b, 1e-3), std::max(c.w, 0.0)});
    const core::StageCost& o = current.cost.stages[s];
    sum_old[0] += o.f;
    sum_old[1] += o.b;
    sum_old[2] += o.w;
    sum_new[0] += c.f;
    sum_new[1] += c.b;
    sum_new[2] += c.w;
  }
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan =
      PlanJob(spec, layout, out.costs, current.version + 1);
  if (!plan.ok()) return plan.status();
  out.plan = *std::move(plan);
  absl::StatusOr<double> old_bubble = BubbleAt(current, measured, reduce_ms);
  if (!old_bubble.ok()) return old_bubble.status();
  absl::StatusOr<double> new_bubble = BubbleAt(*out.plan, measured, reduce_ms);
  if (!new_bubble.ok()) return new_bubble.status();
  out.old_bubble = *old_bubble;
  out.new_bubble = *new_bubble;
  auto ratio = [&](int k) { return sum_old[k] > 0 ? sum_new[k] / sum_old[k] : 0.0; };
  out.reason = absl::StrFormat(
      "measured over iterations %d-%d: F %.2fx, B %.2fx, W %.2fx the costs plan v%d was made "
      "from; predicted bubble %.4f -> %.4f",
      window.first_iteration + 1, window.last_iteration + 1, ratio(0), ratio(1), ratio(2),
      current.version, out.old_bubble, out.new_bubble);
  return out;
}

int SwitchIteration(int measured_iteration, double iteration_seconds) {
  int lead = 3;
  if (iteration_seconds > 0) {
    lead = std::max(lead, 1 + static_cast<int>(std::ceil(std::min(0.5 / iteration_seconds, 1e6))));
  }
  return measured_iteration + lead;
}

}  // namespace zpipe::coordinator
