// Replays a plan that a general solver found (bench/mip_bound.py --replay) through ZeroPipe's
// validator and simulator, with the problem of the row it came from (bench/mip_model.h's JSON:
// the stages' costs and memory, T_comm, the memory limit), and prints its simulated span. So a
// second certificate's plan is checked the way every plan is: a solver's model that disagreed
// with the simulator (an order the validator refuses, memory over the limit, or another span)
// would show here.
//   zpipe_replay_plan MODEL.json PLAN
// PLAN in the zpipe-plan text form (core/plan.h). Prints `span X` and exits 0 when the plan is
// valid; exits 1 saying why when it is not, 2 on a usage or input error.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/plan.h"
#include "core/simulator.h"
#include "core/validator.h"
#include "nlohmann/json.hpp"

namespace zpipe {
namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: zpipe_replay_plan MODEL.json PLAN\n";
    return 2;
  }
  const std::optional<std::string> model_text = ReadFile(argv[1]);
  const std::optional<std::string> plan_text = ReadFile(argv[2]);
  if (!model_text || !plan_text) {
    std::cerr << "zpipe_replay_plan: cannot read " << (model_text ? argv[2] : argv[1]) << "\n";
    return 2;
  }
  core::CostModel cost;
  double limit = 0;
  try {
    const nlohmann::json model = nlohmann::json::parse(*model_text);
    cost.comm = model.at("comm").get<double>();
    for (const nlohmann::json& s : model.at("stages")) {
      cost.stages.push_back(core::StageCost{.f = s.at("f").get<double>(),
                                            .b = s.at("b").get<double>(),
                                            .w = s.at("w").get<double>(),
                                            .mem_f = s.at("mem_f").get<double>(),
                                            .mem_b = s.at("mem_b").get<double>(),
                                            .mem_w = s.at("mem_w").get<double>()});
    }
    limit = model.at("memory_limit").get<double>();
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "zpipe_replay_plan: " << argv[1] << ": not a row model (" << e.what() << ")\n";
    return 2;
  }
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(*plan_text);
  if (!plan.ok()) {
    std::cerr << "zpipe_replay_plan: " << argv[2] << ": " << plan.status().message() << "\n";
    return 2;
  }
  if (plan->num_stages() != static_cast<int>(cost.stages.size())) {
    std::cerr << "zpipe_replay_plan: the plan has " << plan->num_stages()
              << " stages, the model " << cost.stages.size() << "\n";
    return 2;
  }
  if (absl::Status valid = core::ValidatePlan(*plan, {.cost = &cost, .memory_limit = limit});
      !valid.ok()) {
    std::cerr << "zpipe_replay_plan: invalid plan: " << valid.message() << "\n";
    return 1;
  }
  absl::StatusOr<core::SimResult> sim = core::Simulate(*plan, cost);
  if (!sim.ok()) {
    std::cerr << "zpipe_replay_plan: the simulator refuses the plan: " << sim.status().message()
              << "\n";
    return 1;
  }
  std::printf("span %.9g\n", sim->span);
  return 0;
}

}  // namespace
}  // namespace zpipe

int main(int argc, char** argv) { return zpipe::Main(argc, argv); }
