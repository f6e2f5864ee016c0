// The `zpipe` command line users run. It answers what needs no coordinator itself (dispatch.h:
// --help, --version, usage errors, `completion`, the local `plan`) and execs zpipe-remote, the
// binary beside it, with the same arguments for every other command. So the local commands load
// only the command table, core and render: no gRPC, protobuf or OpenSSL to link at start, no
// thread, no socket (tests/cli/plan_cli_test.cc checks both).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "client/cli_common.h"
#include "client/dispatch.h"

namespace zpipe::cli {
namespace {

constexpr char kRemoteBinary[] = "zpipe-remote";

// zpipe-remote beside this executable: in the build tree (build/client/) and in every installed
// layout (bin/ of a prefix, the .deb, the images), the two are always installed together.
std::string RemotePath() {
  std::string self(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size());
  if (n <= 0 || static_cast<size_t>(n) >= self.size()) return kRemoteBinary;
  self.resize(n);
  return self.substr(0, self.rfind('/') + 1) + kRemoteBinary;
}

// Replaces this process with zpipe-remote ARGS; returns only when that failed.
int ExecRemote(int argc, char** argv) {
  const std::string path = RemotePath();
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  std::cout.flush();  // nothing is pending today; a later message must not be lost
  execv(path.c_str(), args.data());
  std::cerr << "zpipe: cannot run " << path << ": " << std::strerror(errno)
            << "\nIt runs zpipe's commands that talk to a coordinator and belongs beside zpipe: "
               "reinstall ZeroPipe (or build the zpipe target, which builds both).\n";
  return kExitUsage;
}

}  // namespace
}  // namespace zpipe::cli

int main(int argc, char** argv) {
  zpipe::cli::Invocation inv;
  if (std::optional<int> exit = zpipe::cli::RunLocalCommand(
          std::vector<std::string>(argv + 1, argv + argc), inv)) {
    return *exit;
  }
  return zpipe::cli::ExecRemote(argc, argv);
}
