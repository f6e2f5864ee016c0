#include "coordinator/worker_match.h"

#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {
namespace {

// Workers named in a waiting reason before "and N more".
constexpr int kMaxNamed = 4;

std::string DeviceName(const WorkerRegistration& w) {
  return absl::StrCat(DeviceKindName(w.device_kind), ":", w.device_index);
}

}  // namespace

std::string CannotRunReason(const WorkerRegistration& w, DeviceKind device) {
  if (w.device_kind != device) return absl::StrCat("started for ", DeviceName(w));
  if (device == DeviceKind::kCpu) return "";
  if (!w.capabilities) {
    return "reported no capabilities (a zpipe-worker older than this coordinator)";
  }
  const WorkerCapabilities& c = *w.capabilities;
  if (!c.torch_cuda) {
    return absl::StrCat("LibTorch ", c.libtorch_version.empty() ? "?" : c.libtorch_version,
                        " CPU-only");
  }
  if (!c.nccl) return "built without NCCL";
  if (c.cuda_device_count == 0) return "LibTorch sees no CUDA device";
  if (w.device_index >= c.cuda_device_count) {
    return absl::StrCat("started for ", DeviceName(w), " but LibTorch sees ", c.cuda_device_count,
                        " CUDA device", c.cuda_device_count == 1 ? "" : "s");
  }
  return "";
}

std::string WaitingReason(const JobSpec& spec, int available,
                          const std::vector<const WorkerRegistration*>& registered) {
  const absl::string_view kind = DeviceKindName(spec.device);
  std::string reason = absl::StrCat("waiting for ", spec.world_size(), " idle ", kind, " workers (",
                                    available, " available)");
  int able = 0, unable = 0;
  std::string named;
  for (const WorkerRegistration* w : registered) {
    const std::string why = CannotRunReason(*w, spec.device);
    if (why.empty()) {
      ++able;
      continue;
    }
    if (unable++ < kMaxNamed)
      absl::StrAppend(&named, named.empty() ? "" : "; ", w->name, ": ", why);
  }
  if (unable == 0) return reason;
  if (unable > kMaxNamed) absl::StrAppend(&named, "; and ", unable - kMaxNamed, " more");
  absl::StrAppend(&reason, "; ", able, " of ", registered.size(), " registered worker",
                  registered.size() == 1 ? "" : "s", " can run ", kind, " jobs (", named, ")");
  return reason;
}

}  // namespace zpipe::coordinator
