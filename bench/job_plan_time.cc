// Prints how long coordinator::PlanJob takes to make a job's plan, with the greedy pass alone
// (schedule.search_budget 0) and with the search jobs run by default (1 s of simulation work),
// for the schedules that search, at job shapes p 2-8, m 8-64 and p = 32, m = 256, with uneven
// per-stage costs as profiling measures them (each stage's F, B and W drawn from 0.7-1.3 times
// their mean, seeded), and the spans both plans reach.
//   zpipe_job_plan_time [SEED]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "coordinator/planner.h"
#include "core/placement.h"
#include "core/schedule.h"

namespace zpipe {
namespace {

using coordinator::JobPlan;
using coordinator::JobSpec;
using coordinator::ModelLayout;

JobSpec Spec(const char* schedule, int p, int m, double budget) {
  JobSpec spec;
  spec.model = coordinator::SyntheticConfig{/*forward_ms=*/10, /*backward_ms=*/10,
                                            /*weight_ms=*/8, /*activation_kb=*/512,
                                            /*params_mb=*/8};
  spec.pipeline = p;
  spec.schedule = schedule;
  spec.microbatches = m;
  spec.microbatch_size = 1;
  spec.iterations = 1;
  spec.search_budget = budget;
  return spec;
}

// Profiled-like stage costs: the spec's means, each scaled by 0.7-1.3.
ModelLayout Layout(const JobSpec& spec, std::mt19937_64& rng) {
  const auto kind = *core::ParseScheduleKind(spec.schedule);
  const core::Placement placement = core::PlacementFor(kind, spec.pipeline);
  const int stages = placement.num_stages(), v = placement.chunks_per_rank();
  std::uniform_real_distribution<double> scale(0.7, 1.3);
  ModelLayout layout;
  layout.source = "measured";
  for (int s = 0; s < stages; ++s) {
    ModelLayout::Stage st;
    st.stage = s;
    st.forward_ms = 10.0 / v * scale(rng);
    st.backward_ms = 10.0 / v * scale(rng);
    st.weight_ms = 8.0 / v * scale(rng);
    st.activation_kb = 512;
    st.params_mb = 8.0 / v;
    layout.stages.push_back(st);
  }
  return layout;
}

struct Timed {
  double ms = 0, span = 0;
};

Timed Time(const JobSpec& spec, const ModelLayout& layout) {
  const auto start = std::chrono::steady_clock::now();
  auto plan = coordinator::PlanJob(spec, &layout);
  const auto end = std::chrono::steady_clock::now();
  if (!plan.ok()) {
    std::fprintf(stderr, "%s p=%d m=%d: %s\n", spec.schedule.c_str(), spec.pipeline,
                 spec.microbatches, std::string(plan.status().message()).c_str());
    std::exit(1);
  }
  return {std::chrono::duration<double, std::milli>(end - start).count(), (*plan)->sim.span};
}

int Main(int argc, char** argv) {
  std::mt19937_64 rng(argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1);
  const std::vector<std::pair<int, int>> shapes = {{2, 8},  {4, 8},  {4, 16}, {4, 32}, {8, 8},
                                                   {8, 16}, {8, 32}, {8, 64}, {32, 256}};
  std::printf("%-7s %2s %3s %10s %10s %10s %10s\n", "sched", "p", "m", "greedy_ms", "search_ms",
              "greedy", "search");
  for (const char* schedule : {"zb-1p", "zb-2p", "zb-v", "v-half"}) {
    for (const auto& [p, m] : shapes) {
      const ModelLayout layout = Layout(Spec(schedule, p, m, 0), rng);
      const Timed greedy = Time(Spec(schedule, p, m, 0), layout);
      const Timed search = Time(Spec(schedule, p, m, 1), layout);
      std::printf("%-7s %2d %3d %10.1f %10.1f %10.2f %10.2f\n", schedule, p, m, greedy.ms,
                  search.ms, greedy.span, search.span);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace zpipe

int main(int argc, char** argv) { return zpipe::Main(argc, argv); }
