// Fuzz target: plan text (core/plan.h ParsePlanText), the form in which workers receive their
// plan. A parsed plan must print and parse back to itself; it is then validated and, if valid,
// simulated, as the coordinator and workers would.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/cost_model.h"
#include "core/plan.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "plan text: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zpipe::core;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Plan> plan = ParsePlanText(text);
  if (!plan.ok()) {
    if (plan.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("error is not INVALID_ARGUMENT: " + plan.status().ToString());
    }
    return 0;
  }
  const std::string printed = PlanToText(*plan);
  absl::StatusOr<Plan> again = ParsePlanText(printed);
  if (!again.ok()) Fail("printed plan does not parse: " + again.status().ToString());
  if (!(*again == *plan)) Fail("printed plan parses to another plan:\n" + printed);

  const CostModel cost =
      CostModel::Uniform(plan->placement.num_stages(),
                         {.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5});
  if (!ValidatePlan(*plan, {.cost = &cost}).ok()) return 0;
  (void)Simulate(*plan, cost);
  return 0;
}
