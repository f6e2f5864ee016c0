// The progress a fake worker reports for one iteration: the compute actions (F, B, W, BW) of its
// rank's plan, as a real worker reports them. Shared by the test workers of tests/cli and
// tests/coordinator.
#ifndef ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_
#define ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_

#include <vector>

#include "core/plan.h"
#include "wire/compute_op.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe::testing {

// Appends one event per compute action of `actions`, in order, as done in `iteration`. Sends,
// receives and reductions are left out: the fake workers do not report them.
inline void AddComputeProgress(const std::vector<core::Action>& actions, int iteration,
                               v1::ProgressBatch* batch) {
  for (const core::Action& action : actions) {
    if (!core::IsCompute(action.kind)) continue;
    batch->add_iterations(iteration);
    batch->add_ops(wire::ComputeOpOf(action.kind));
    batch->add_stages(action.stage);
    batch->add_microbatches(action.microbatch);
  }
}

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_
