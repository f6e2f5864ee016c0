// Prints our bubble rates beside the published ones (ZB paper, Tables 5 and 8) at the same
// memory limits, and the time each plan took to generate, lower and simulate.
#include <chrono>
#include <cstdio>
#include <string>

#include "bench/published.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe {
namespace {

core::CostModel PaperCost(const bench::PublishedSetting& s, int stages) {
  return core::CostModel::Uniform(stages, bench::PaperStageCost(s), s.t_comm);
}

int Main() {
  std::printf("%-11s %3s %4s %-12s %9s %9s %9s %8s %10s\n", "model", "p", "m", "schedule", "ours",
              "published", "delta", "valid", "time_ms");
  int worse = 0;
  for (const auto& s : bench::PublishedSettings()) {
    for (const auto& [name, published] : s.bubble) {
      auto kind = core::ParseScheduleKind(name);
      if (!kind.ok()) continue;
      core::ScheduleRequest req;
      req.pipeline = s.p;
      req.microbatches = s.m;
      req.cost = PaperCost(s, core::PlacementFor(*kind, s.p).num_stages());
      const double limit = core::DefaultMemoryLimit(*kind, s.p, s.m, req.cost);
      const auto t0 = std::chrono::steady_clock::now();
      auto plan = core::GenerateSchedule(*kind, req);
      absl::StatusOr<core::SimResult> sim = absl::UnknownError("not run");
      if (!plan.ok()) {
        sim = plan.status();
      } else {
        auto lowered = core::LowerComm(*plan);
        sim = lowered.ok() ? core::Simulate(*lowered, req.cost)
                           : absl::StatusOr<core::SimResult>(lowered.status());
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!sim.ok()) {
        std::printf("%-11s %3d %4d %-12s  unavailable: %s\n", s.model.c_str(), s.p, s.m,
                    name.c_str(), std::string(sim.status().message()).c_str());
        continue;
      }
      const bool valid = core::ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = limit}).ok();
      const double delta = sim->bubble_rate - published;
      if (delta > 0.002) ++worse;
      std::printf("%-11s %3d %4d %-12s %9.4f %9.4f %+9.4f %8s %10.1f\n", s.model.c_str(), s.p, s.m,
                  name.c_str(), sim->bubble_rate, published, delta, valid ? "yes" : "NO", ms);
    }
  }
  std::printf("\n%d setting(s) more than 0.002 above the published bubble rate\n", worse);
  return 0;
}

}  // namespace
}  // namespace zpipe

int main() { return zpipe::Main(); }
