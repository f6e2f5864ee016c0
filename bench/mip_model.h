// A plan's scheduling problem as JSON for bench/mip_bound.py (the optimality table's and the
// reference table's second certificate: the same problem solved by CP-SAT, or as a mixed-integer
// model by HiGHS). Header-only; the tables that write it link nlohmann_json.
#ifndef ZPIPE_BENCH_MIP_MODEL_H_
#define ZPIPE_BENCH_MIP_MODEL_H_

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>

#include "core/planning.h"
#include "nlohmann/json.hpp"

namespace zpipe::bench {

// What the row is: its table ("uniform", "skewed", "reference"), schedule and shape; `span`: the
// plan whose optimality is in question (the default plan's, or the reference generator's);
// `bound`, `optimal`: what our own solver proved about it.
struct MipRow {
  std::string costs;
  std::string schedule;
  double span = 0;
  double bound = 0;
  bool optimal = false;
};

// The placement, each stage's rank, costs and memory, the memory limit, T_comm and whether B and W
// are apart, from `plan` (its placement, cost model and limit), with `row`; and `plan`'s compute
// actions as [kind, stage, microbatch, start] (its simulated times: CP-SAT's first hint).
inline nlohmann::json MipModel(const core::PlannedSchedule& plan, const MipRow& row) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < plan.plan.placement.num_stages(); ++s) {
    const core::StageCost& sc = plan.cost.stages[s];
    stages.push_back({{"rank", plan.plan.placement.RankOf(s)},
                      {"f", sc.f},
                      {"b", sc.b},
                      {"w", sc.w},
                      {"mem_f", sc.mem_f},
                      {"mem_b", sc.mem_b},
                      {"mem_w", sc.mem_w}});
  }
  bool split = false;  // B and W apart (BW otherwise, as 1F1B plans)
  nlohmann::json actions = nlohmann::json::array();
  for (size_t r = 0; r < plan.plan.ranks.size(); ++r) {
    for (size_t i = 0; i < plan.plan.ranks[r].size(); ++i) {
      const core::Action& a = plan.plan.ranks[r][i];
      split = split || a.kind == core::ActionKind::kBackwardInput;
      if (core::IsCompute(a.kind)) {  // (the tables plan no recomputation: no R)
        actions.push_back({std::string(core::ActionKindName(a.kind)), a.stage, a.microbatch,
                           plan.sim.timings[r][i].start});
      }
    }
  }
  return {{"schedule", row.schedule},
          {"costs", row.costs},
          {"placement", std::string(core::PlacementKindName(plan.plan.placement.kind()))},
          {"chunks", plan.plan.placement.chunks_per_rank()},
          {"pipeline", plan.plan.num_ranks()},
          {"microbatches", plan.plan.num_microbatches},
          {"stages", stages},
          {"comm", plan.cost.comm},
          {"memory_limit", plan.memory_limit},
          {"split", split},
          {"span", row.span},
          {"bound", row.bound},
          {"optimal", row.optimal},
          {"plan", actions}};
}

// Makes `dir` for the models when it is not there; false (saying why on stderr, as `program`)
// when it cannot.
inline bool MakeMipModelFolder(const std::string& dir, const std::string& program) {
  std::error_code error;
  if (std::filesystem::is_directory(dir) || std::filesystem::create_directories(dir, error)) {
    return true;
  }
  std::cerr << program << ": --models " << dir << ": cannot make the folder (" << error.message()
            << ")\n";
  return false;
}

// Writes it to DIR/<costs>-<schedule>-p<P>-m<M>.json (a suffix `tag` before .json when rows share
// a shape). False when the file cannot be written.
inline bool WriteMipModel(const std::string& dir, const core::PlannedSchedule& plan,
                          const MipRow& row, const std::string& tag = "") {
  const std::string name = row.costs + "-" + row.schedule + "-p" +
                           std::to_string(plan.plan.num_ranks()) + "-m" +
                           std::to_string(plan.plan.num_microbatches) + tag + ".json";
  std::ofstream out(std::filesystem::path(dir) / name);
  out << MipModel(plan, row).dump(1) << "\n";
  return static_cast<bool>(out);
}

}  // namespace zpipe::bench

#endif  // ZPIPE_BENCH_MIP_MODEL_H_
