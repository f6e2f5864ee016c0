// `zpipe workers [--all]`: the coordinator's worker registry.
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"

namespace zpipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: zpipe workers [--all]\n  --all  also list workers lost recently\n";

std::string Lower(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string Bytes(uint64_t bytes) {
  if (bytes == 0) return "-";
  return absl::StrFormat("%.1fGiB", static_cast<double>(bytes) / (1ull << 30));
}

}  // namespace

int RunWorkersCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args;
  args.Switch("--all");
  if (absl::Status s = args.Parse(argv); !s.ok())
    return ctx.Usage("workers", std::string(s.message()), kUsage);
  if (!args.positionals().empty()) return ctx.Usage("workers", "takes no arguments", kUsage);
  absl::StatusOr<std::vector<v1::Worker>> workers = ctx.client().Workers(args.Has("--all"));
  if (!workers.ok()) return ctx.Fail("workers", workers.status());
  if (ctx.json()) {
    v1::ListWorkersResponse response;
    for (const v1::Worker& w : *workers) *response.add_workers() = w;
    ctx.out() << ToJson(response) << "\n";
    return kExitOk;
  }
  Table t({"NAME", "STATE", "DEVICE", "HOST", "MEMORY", "JOB", "RANK", "LAST HEARTBEAT"});
  for (const v1::Worker& w : *workers) {
    const bool busy = w.state() == v1::WORKER_STATE_BUSY;
    t.Add({w.name(), Lower(v1::WorkerState_Name(w.state()), "WORKER_STATE_"),
           absl::StrCat(Lower(v1::DeviceKind_Name(w.device_kind()), "DEVICE_KIND_"), ":",
                        w.device_index()),
           w.host(), Bytes(w.memory_bytes()), busy ? w.job_id() : "-",
           busy ? absl::StrCat(w.pipeline_rank(), "/", w.data_rank()) : "-",
           FormatTime(w.last_heartbeat_time().seconds())});
  }
  t.Print(ctx.out());
  return kExitOk;
}

}  // namespace zpipe::cli
