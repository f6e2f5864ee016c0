// Re-planning from measured costs (schedule.replan_every): the pure part. The job manager keeps a
// window of the iterations run with the current plan, and every replan_every of them asks
// ProposeReplan for a plan made from their mean measured per-stage costs; it switches when that
// plan's predicted bubble, at the same measured costs, beats the running plan's by more than
// schedule.replan_threshold (job_plans.h carries the switch out).
//
// Measured costs: each rank's mean F, B and W per action over the window (MeasuredCostModel,
// coordinator/measured_bubble.h), averaged over the data-parallel replicas. Both plans are
// simulated with those costs and the measured mean REDUCE time, so the comparison is like for
// like; the new plan keeps the schedule kind, placement, memory limit and buckets.
#ifndef ZPIPE_COORDINATOR_REPLANNER_H_
#define ZPIPE_COORDINATOR_REPLANNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/domain.h"
#include "coordinator/planner.h"

namespace zpipe::coordinator {

// Sums of the ranks' measurements over iterations that all ran one plan version.
struct ReplanWindow {
  std::vector<RankStats> sums;  // by global rank
  int iterations = 0;
  int first_iteration = -1;
  int last_iteration = -1;
};

// Adds `summary` when every rank ran it with `plan_version`; returns whether it was added.
bool AddToWindow(ReplanWindow& window, const IterationSummary& summary, int plan_version);

struct ReplanProposal {
  std::shared_ptr<const JobPlan> plan;  // version = the current plan's + 1
  std::vector<PlanStageCost> costs;     // what it was generated from
  double old_bubble = 0;                // the running plan at the measured costs
  double new_bubble = 0;                // the proposed plan at the measured costs
  // How the measured costs differ, for humans (iterations counted from 1, like `zpipe watch`).
  std::string reason;
};

// The plan made from `window`'s mean measured costs. `layout`: a TorchScript model's stages
// (null otherwise). Errors: a window without iterations or not matching the plan's shape, or a
// planning error.
absl::StatusOr<ReplanProposal> ProposeReplan(const JobSpec& spec, const JobPlan& current,
                                             const ReplanWindow& window,
                                             const ModelLayout* layout = nullptr);

// The first iteration a switch decided after `measured_iteration` completed may take effect:
// far enough ahead that every rank gets the new plan before it starts that iteration (ranks of
// a pipeline run at most about one iteration apart); at least 3 iterations and 0.5 s ahead.
int SwitchIteration(int measured_iteration, double iteration_seconds);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_REPLANNER_H_
