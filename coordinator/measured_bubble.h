// Predicted bubble at measured costs: the job's plan re-simulated (core::Simulate) with the F/B/W
// durations its workers measured, so that measured - predicted is the runtime's own overhead
// (waits, copies, scheduling jitter), not the schedule's.
//
// Cost model, per data-parallel replica: a rank's report gives its busy time by op for one
// iteration (forward_s; backward_s = B and fused BW; weight_s = W). Dividing by the number of such
// actions in the rank's plan gives the rank's mean F, B and W, which every stage on that rank gets
// (a report does not split a rank's time by chunk). A fused BW costs b + w in the simulator, so
// b = (backward_s - n_BW * w) / (n_B + n_BW) with w = weight_s / n_W (w = 0 when the rank runs no
// W). Memory deltas and the cross-rank T_comm stay the plan's; each REDUCE takes the replica's mean
// measured reduce time. A stage whose rank reported no time for an op keeps the planned cost.
// Each replica is simulated on its own; the job's bubble combines them like the measured one:
// 1 - sum of busy / (p * d * max span).
#ifndef ZPIPE_COORDINATOR_MEASURED_BUBBLE_H_
#define ZPIPE_COORDINATOR_MEASURED_BUBBLE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "coordinator/metrics.h"
#include "coordinator/planner.h"
#include "core/cost_model.h"

namespace zpipe::coordinator {

// The cost model (milliseconds, like the planner's) for one replica. `replica[r]` is pipeline
// rank r's report; InvalidArgument when its size is not the plan's rank count.
absl::StatusOr<core::CostModel> MeasuredCostModel(const JobPlan& plan,
                                                  absl::Span<const RankStats> replica);

// `ranks` by global rank (data_rank * p + pipeline_rank), p * d of them (an IterationSummary's).
absl::StatusOr<PredictedBubble> PredictBubbleAtMeasuredCosts(const JobPlan& plan,
                                                             absl::Span<const RankStats> ranks);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_MEASURED_BUBBLE_H_
