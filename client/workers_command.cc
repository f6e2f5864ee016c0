// `zpipe workers [--all] [--wide] [--limit N [--continue TOKEN]]`: the coordinator's worker
// registry, with what each worker reported it can run (WorkerCapabilities).
#include <ostream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"

namespace zpipe::cli {
namespace {

std::string Lower(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string Bytes(uint64_t bytes) {
  if (bytes == 0) return "-";
  return absl::StrFormat("%.1fGiB", static_cast<double>(bytes) / (1ull << 30));
}

// The CUDA device a CUDA worker drives, when its runtime listed it; null otherwise.
const v1::CudaDevice* OwnDevice(const v1::Worker& w) {
  if (w.device_kind() != v1::DEVICE_KIND_CUDA) return nullptr;
  for (const v1::CudaDevice& d : w.capabilities().devices()) {
    if (d.index() == w.device_index()) return &d;
  }
  return nullptr;
}

// "H100 80GB HBM3" (the vendor prefix dropped unless `full`); "-" when not known.
std::string GpuName(const v1::Worker& w, bool full) {
  const v1::CudaDevice* d = OwnDevice(w);
  if (d == nullptr || d->name().empty()) return "-";
  if (!full && absl::StartsWith(d->name(), "NVIDIA ")) return d->name().substr(7);
  return d->name();
}

// A CUDA worker's device memory when known, else the memory it registered.
std::string Memory(const v1::Worker& w) {
  const v1::CudaDevice* d = OwnDevice(w);
  return Bytes(d != nullptr ? d->total_memory_bytes() : w.memory_bytes());
}

// "1.13.0+cpu" or "2.3.1+cuda"; "?" from a worker that reported no capabilities.
std::string LibTorch(const v1::Worker& w) {
  if (!w.has_capabilities()) return "?";
  const v1::WorkerCapabilities& c = w.capabilities();
  return absl::StrCat(c.libtorch_version().empty() ? "?" : c.libtorch_version(),
                      c.torch_cuda() ? "+cuda" : "+cpu");
}

// The NCCL version, "-" for a worker built without NCCL, "?" when not reported.
std::string Nccl(const v1::Worker& w) {
  if (!w.has_capabilities()) return "?";
  const v1::WorkerCapabilities& c = w.capabilities();
  if (!c.nccl()) return "-";
  return c.nccl_version().empty() ? "?" : c.nccl_version();
}

std::string Cuda(const v1::Worker& w) {
  if (!w.has_capabilities()) return "?";
  const std::string& v = w.capabilities().cuda_runtime_version();
  return v.empty() ? "-" : v;
}

}  // namespace

int RunWorkersCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("workers");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "workers", args, argv)) return *exit;
  if (!args.positionals().empty()) return ctx.Usage("workers", "takes no arguments");
  absl::StatusOr<PageArgs> paging = ParsePageArgs(args);
  if (!paging.ok()) return ctx.Usage("workers", paging.status().message());
  absl::StatusOr<std::vector<v1::Worker>> workers;
  std::string next_token;
  if (paging->limit) {
    ListWorkersOptions options;
    options.include_dead = args.Has("--all");
    options.page_size = *paging->limit;
    options.page_token = paging->token;
    absl::StatusOr<WorkerPage> page = ctx.client().ListWorkers(options);
    if (page.ok()) {
      workers = std::move(page->workers);
      next_token = page->next_page_token;
    } else {
      workers = page.status();
    }
  } else {
    workers = ctx.client().Workers(args.Has("--all"));
  }
  if (!workers.ok()) return ctx.Fail("workers", workers.status());
  // After the page, whichever way it is printed.
  absl::Cleanup hint = [&] {
    PrintNextPageHint(ctx, args.Has("--all") ? "workers --all" : "workers", *paging, next_token);
  };
  if (ctx.json()) {
    Json doc = WorkerListJson(*workers);
    if (!next_token.empty()) doc["next_page_token"] = next_token;
    PrintDocument(ctx, doc);
    return kExitOk;
  }
  if (ctx.names()) {
    for (const v1::Worker& w : *workers) ctx.out() << w.name() << "\n";
    return kExitOk;
  }
  // The default fits 100 columns for usual names; --wide adds what makes it wider.
  const bool wide = args.Has("--wide") || ctx.wide();
  std::vector<std::string> header = {"NAME", "STATE", "DEVICE", "GPU", "MEMORY", "LIBTORCH"};
  if (wide) header.insert(header.end(), {"CUDA", "HOST"});
  header.insert(header.end(), {"NCCL", "JOB", "RANK"});
  if (wide) header.push_back("LAST HEARTBEAT");
  Table t(header);
  for (const v1::Worker& w : *workers) {
    const bool busy = w.state() == v1::WORKER_STATE_BUSY;
    std::vector<std::string> row = {
        w.name(),
        Lower(v1::WorkerState_Name(w.state()), "WORKER_STATE_"),
        absl::StrCat(Lower(v1::DeviceKind_Name(w.device_kind()), "DEVICE_KIND_"), ":",
                     w.device_index()),
        GpuName(w, wide),
        Memory(w),
        LibTorch(w)};
    if (wide) row.insert(row.end(), {Cuda(w), w.host()});
    row.insert(row.end(), {Nccl(w), busy ? w.job_id() : "-",
                           busy ? absl::StrCat(w.pipeline_rank(), "/", w.data_rank()) : "-"});
    if (wide) row.push_back(FormatTime(w.last_heartbeat_time().seconds()));
    t.Add(std::move(row));
  }
  t.Print(ctx.out());
  return kExitOk;
}

}  // namespace zpipe::cli
