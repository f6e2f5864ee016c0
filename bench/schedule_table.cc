// Prints our bubble rates (the greedy pass) beside the published ones (ZB paper, Tables 5 and 8)
// at the same memory limits, the bubble at core's span lower bound, and the time each plan took
// to generate, lower and simulate.
#include <chrono>
#include <cstdio>
#include <string>

#include "bench/published.h"
#include "core/planning.h"
#include "core/validator.h"

namespace zpipe {
namespace {

int Main() {
  std::printf("%-11s %3s %4s %-12s %9s %9s %9s %9s %8s %10s\n", "model", "p", "m", "schedule",
              "ours", "published", "delta", "bound", "valid", "time_ms");
  int worse = 0;
  for (const auto& s : bench::PublishedSettings()) {
    for (const auto& [name, published] : s.bubble) {
      if (!core::ParseScheduleKind(name).ok()) continue;
      core::PlanRequest req;
      req.schedule = name;
      req.pipeline = s.p;
      req.microbatches = s.m;
      req.inputs = [&s](const core::Placement& placement) {
        return core::UniformInputs(placement, bench::PaperStageCost(s), s.t_comm);
      };
      req.validate = false;  // timed: generate, lower, simulate; validated below
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<core::PlannedSchedule> planned = core::PlanSchedule(req);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!planned.ok()) {
        std::printf("%-11s %3d %4d %-12s  unavailable: %s\n", s.model.c_str(), s.p, s.m,
                    name.c_str(), std::string(planned.status().message()).c_str());
        continue;
      }
      const core::SimResult* sim = &planned->sim;
      const bool valid = core::ValidatePlan(planned->plan, {.cost = &planned->cost,
                                                            .memory_limit = planned->memory_limit})
                             .ok();
      const double delta = sim->bubble_rate - published;
      if (delta > 0.002) ++worse;
      std::printf("%-11s %3d %4d %-12s %9.4f %9.4f %+9.4f %9.4f %8s %10.1f\n", s.model.c_str(), s.p,
                  s.m, name.c_str(), sim->bubble_rate, published, delta,
                  planned->bubble_lower_bound, valid ? "yes" : "NO", ms);
    }
  }
  std::printf("\n%d setting(s) more than 0.002 above the published bubble rate\n", worse);
  return 0;
}

}  // namespace
}  // namespace zpipe

int main() { return zpipe::Main(); }
