// Google Benchmark: generate + lower + simulate for every schedule at p = 8, 16, 32 and
// m = 4p, 8p (uniform unit costs, T_comm = 0.05). Run through `scripts/bench schedules`.
#include <benchmark/benchmark.h>

#include "core/planning.h"

namespace zpipe::core {
namespace {

void BM_Schedule(benchmark::State& state, ScheduleKind kind) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  PlanRequest req;
  req.schedule = std::string(ScheduleName(kind));
  req.pipeline = p;
  req.microbatches = m;
  req.inputs = [](const Placement& placement) {
    return UniformInputs(
        placement, StageCost{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5},
        0.05);
  };
  req.validate = false;  // what is measured: generate, lower, simulate
  double bubble = 0;
  for (auto _ : state) {
    absl::StatusOr<PlannedSchedule> planned = PlanSchedule(req);
    if (!planned.ok()) {
      state.SkipWithError(std::string(planned.status().message()).c_str());
      return;
    }
    bubble = planned->sim.bubble_rate;
  }
  state.counters.insert({{"bubble", benchmark::Counter(bubble)},
                         {"actions", benchmark::Counter(static_cast<double>(p) * m * 3)}});
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int p : {8, 16, 32}) {
    for (int f : {4, 8}) b->Args({p, f * p});
  }
  b->Unit(benchmark::kMillisecond);
}

int Register() {
  for (ScheduleKind kind : AllScheduleKinds()) {
    benchmark::RegisterBenchmark(std::string(ScheduleName(kind)).c_str(), BM_Schedule, kind)
        ->Apply(Shapes);
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace zpipe::core

BENCHMARK_MAIN();
