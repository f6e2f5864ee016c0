// UnitRequest and SkewedInputs: the compute-plan request and the skewed cost model the solver,
// search and relaxation tests share.
#ifndef ZPIPE_CORE_TESTING_UNIT_REQUEST_H_
#define ZPIPE_CORE_TESTING_UNIT_REQUEST_H_

#include <string>

#include "core/planning.h"

namespace zpipe::core {

// A compute plan's request (not lowered): unit F, B and W, the ZB paper's memory deltas (B and W
// each free half of what F holds), T_comm 0.1.
inline PlanRequest UnitRequest(const std::string& schedule, int p, int m) {
  PlanRequest req;
  req.schedule = schedule;
  req.pipeline = p;
  req.microbatches = m;
  req.lower = false;
  req.inputs = [](const Placement& pl) {
    return UniformInputs(pl, {.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5},
                         /*comm=*/0.1);
  };
  return req;
}

// The optimality table's skewed costs (bench/optimal_table.cc): the last stage 1.3 times heavier,
// as an LM head makes it, T_B = 1.1 T_F and T_W = 0.6 T_B, the ZB paper's memory deltas, T_comm
// 0.3.
inline PlanInputs SkewedInputs(const Placement& pl) {
  PlanInputs in;
  in.cost.comm = 0.3;
  for (int s = 0; s < pl.num_stages(); ++s) {
    const double heavy = s == pl.num_stages() - 1 ? 1.3 : 1;
    in.cost.stages.push_back(StageCost{
        .f = heavy, .b = 1.1 * heavy, .w = 0.66 * heavy, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5});
  }
  return in;
}

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_TESTING_UNIT_REQUEST_H_
