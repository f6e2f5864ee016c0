// The `zpipe` command line. Subcommands live in their own files; this file only dispatches.
#include <iostream>
#include <string>
#include <vector>

#include "client/plan_command.h"

namespace {

constexpr char kUsage[] =
    "usage: zpipe COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  plan     generate a schedule and print the plan and its statistics\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "plan") return zpipe::cli::RunPlanCommand(args, std::cout, std::cerr);
  std::cerr << "zpipe: unknown command '" << command << "'\n" << kUsage;
  return 2;
}
