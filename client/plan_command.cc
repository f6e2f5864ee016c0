#include "client/plan_command.h"

#include <ostream>

namespace zpipe::cli {

std::string PlanUsage() { return "usage: zpipe plan --schedule NAME --pipeline P --microbatches M\n"; }

int RunPlanCommand(const std::vector<std::string>&, std::ostream&, std::ostream& err) {
  err << "zpipe plan: not implemented yet\n";
  return 2;
}

}  // namespace zpipe::cli
