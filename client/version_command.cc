// `zpipe version [--client]` (and `zpipe --version`): what this zpipe is built from and, unless
// --client, what the coordinator is (GetServerInfo).
#include <ostream>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "zpipe/build_info.h"

namespace zpipe::cli {
namespace {

std::string Line(const std::string& who, const v1::ServerInfo& info) {
  return VersionLine(who, info.version(), info.commit(), info.torch(), info.cuda());
}

}  // namespace

v1::ServerInfo ClientBuildInfo() {
  v1::ServerInfo info;
  info.set_version(build_info::kVersion);
  info.set_commit(build_info::kCommit);
  info.set_torch(build_info::kTorch);
  info.set_cuda(build_info::kCuda);
  return info;
}

int RunVersionCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("version");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "version", args, argv)) return *exit;
  if (!args.positionals().empty()) return ctx.Usage("version", "takes no arguments");
  const v1::ServerInfo client = ClientBuildInfo();
  absl::StatusOr<v1::ServerInfo> server =
      args.Has("--client") ? absl::StatusOr<v1::ServerInfo>(absl::CancelledError())
                           : ctx.client().ServerInfo();
  if (ctx.json()) {
    Json doc{{"client", MessageJson(client)}};
    if (!args.Has("--client")) {
      doc["coordinator"] = server.ok() ? MessageJson(*server) : Json();
      doc["coordinator_address"] = ctx.coordinator();
    }
    PrintDocument(ctx, doc);
  } else {
    ctx.out() << Line("client", client) << "\n";
    if (server.ok()) ctx.out() << Line("coordinator " + ctx.coordinator(), *server) << "\n";
  }
  if (args.Has("--client") || server.ok()) return kExitOk;
  return ctx.Fail("version", server.status());
}

}  // namespace zpipe::cli
