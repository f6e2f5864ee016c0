// The progress a fake worker reports for one iteration: the compute actions (F, B, W, BW) of its
// rank's plan, as a real worker reports them, and the iteration's report. Shared by the test
// workers of tests/cli and tests/coordinator and the simulated workers of bench/scale_bench.cc.
#ifndef ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_
#define ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_

#include <string>
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

// The IterationReport of a rank that took `duration` for `iteration`, split as a busy pipeline
// rank's would be (80% busy); the last pipeline rank reports a loss that falls with the iteration.
inline v1::IterationReport MakeIterationReport(const std::string& job_id, int iteration,
                                               int pipeline_rank, int data_rank,
                                               int pipeline_size, double duration_s) {
  v1::IterationReport r;
  r.set_job_id(job_id);
  r.set_iteration(iteration);
  v1::RankIterationStats* s = r.mutable_stats();
  const double d = duration_s;
  s->set_pipeline_rank(pipeline_rank);
  s->set_data_rank(data_rank);
  s->set_duration_s(d);
  s->set_busy_s(0.8 * d);
  s->set_idle_s(0.2 * d);
  s->set_forward_s(0.3 * d);
  s->set_backward_s(0.3 * d);
  s->set_weight_s(0.2 * d);
  s->set_bubble_ratio(0.2);
  if (pipeline_rank == pipeline_size - 1) r.set_loss(5.0 / (1 + iteration));
  return r;
}

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_SUPPORT_COMPUTE_PROGRESS_H_
