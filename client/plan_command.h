// `zpipe plan`: generate a schedule locally, print the plan and its simulated statistics.
#ifndef ZPIPE_CLIENT_PLAN_COMMAND_H_
#define ZPIPE_CLIENT_PLAN_COMMAND_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "client/command_spec.h"

namespace zpipe::cli {

// Runs `zpipe plan ARGS...` (args exclude "zpipe" and "plan"). Returns the process exit code:
// 0 on success, 2 on bad arguments or a schedule that cannot be generated (one-line error on
// `err`). Output goes to `out` unless `-f FILE` (--file) is given; -o is text or json.
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The local plan's flags (all but -o, which is zpipe's global output format): the command table
// lists them under `plan` beside --job, and RunPlanCommand parses them (with -o).
const std::vector<FlagSpec>& LocalPlanFlags();

// Usage text of `zpipe plan` (its --help).
std::string PlanUsage();

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_PLAN_COMMAND_H_
