// UnitRequest: the compute-plan request the solver and relaxation tests share.
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

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_TESTING_UNIT_REQUEST_H_
