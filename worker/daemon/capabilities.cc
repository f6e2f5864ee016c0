#include "worker/daemon/capabilities.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifdef ZPIPE_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace zpipe::worker {
namespace {

// probe_error is bounded by the coordinator (worker.proto); keep well inside it.
constexpr size_t kMaxProbeError = 1000;

// Whether LibTorch was built with CUDA, and the CUDA runtime version it was built with. Without
// LibTorch's CUDA library loaded, at::detail::getCUDAHooks() is a stub whose hasCUDART() is
// false. The same calls exist in LibTorch 1.13 and 2.x; this is the one place to adapt should a
// later LibTorch move them.
void ProbeTorchCuda(RuntimeFacts& facts) {
  try {
    const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
    facts.torch_cuda = hooks.hasCUDART();
    if (facts.torch_cuda) facts.torch_cudart_version = static_cast<int>(hooks.versionCUDART());
  } catch (const std::exception& e) {
    facts.errors.push_back(absl::StrCat("LibTorch CUDA build: ", e.what()));
  }
  if (!facts.torch_cuda) return;
  try {
    facts.torch_device_count = static_cast<int>(torch::cuda::device_count());
  } catch (const std::exception& e) {
    facts.errors.push_back(absl::StrCat("torch::cuda::device_count: ", e.what()));
  }
}

#ifdef ZPIPE_WITH_NCCL
void ProbeCudaRuntimeAndNccl(RuntimeFacts& facts) {
  facts.nccl = true;
  int code = 0;
  if (ncclResult_t r = ncclGetVersion(&code); r == ncclSuccess) {
    facts.nccl_version = code;
  } else {
    facts.errors.push_back(absl::StrCat("ncclGetVersion: ", ncclGetErrorString(r)));
  }
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) facts.cudart_version = version;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    facts.errors.push_back(absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(e)));
    cudaGetLastError();  // not sticky, but leave nothing behind for the first real CUDA call
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      facts.errors.push_back(
          absl::StrCat("cudaGetDeviceProperties(", i, "): ", cudaGetErrorString(e)));
      cudaGetLastError();
      continue;
    }
    facts.devices.push_back({i, prop.name, static_cast<uint64_t>(prop.totalGlobalMem)});
  }
}
#endif

}  // namespace

RuntimeFacts ProbeRuntime() {
  RuntimeFacts facts;
  facts.libtorch_version = TORCH_VERSION;
  ProbeTorchCuda(facts);
#ifdef ZPIPE_WITH_NCCL
  ProbeCudaRuntimeAndNccl(facts);
#endif
  return facts;
}

v1::WorkerCapabilities BuildCapabilities(const RuntimeFacts& facts) {
  v1::WorkerCapabilities c;
  c.set_libtorch_version(facts.libtorch_version);
  c.set_torch_cuda(facts.torch_cuda);
  c.set_cuda_device_count(facts.torch_cuda ? facts.torch_device_count : 0);
  // The runtime actually loaded says more than the one LibTorch was compiled against.
  c.set_cuda_runtime_version(CudaVersionName(
      facts.cudart_version != 0 ? facts.cudart_version : facts.torch_cudart_version));
  c.set_nccl(facts.nccl);
  c.set_nccl_version(NcclVersionName(facts.nccl_version));
  for (const RuntimeFacts::Device& d : facts.devices) {
    v1::CudaDevice* out = c.add_devices();
    out->set_index(d.index);
    out->set_name(d.name);
    out->set_total_memory_bytes(d.total_memory_bytes);
  }
  std::string error = absl::StrJoin(facts.errors, "; ");
  if (error.size() > kMaxProbeError) error = error.substr(0, kMaxProbeError - 3) + "...";
  c.set_probe_error(error);
  return c;
}

std::string DescribeCapabilities(const v1::WorkerCapabilities& c) {
  std::string out =
      absl::StrCat("LibTorch ", c.libtorch_version(), c.torch_cuda() ? " CUDA" : " CPU-only",
                   c.nccl() ? absl::StrCat(", NCCL ", c.nccl_version()) : ", no NCCL");
  if (!c.cuda_runtime_version().empty()) {
    absl::StrAppend(&out, ", CUDA runtime ", c.cuda_runtime_version());
  }
  absl::StrAppend(&out, ", ", c.cuda_device_count(), " CUDA device",
                  c.cuda_device_count() == 1 ? "" : "s", " seen by LibTorch");
  for (const v1::CudaDevice& d : c.devices()) {
    absl::StrAppend(&out, "; cuda:", d.index(), " ", d.name(), " ", d.total_memory_bytes() >> 20,
                    " MiB");
  }
  if (!c.probe_error().empty()) absl::StrAppend(&out, " (", c.probe_error(), ")");
  return out;
}

std::string CudaVersionName(int version) {
  if (version <= 0) return "";
  return absl::StrCat(version / 1000, ".", version % 1000 / 10);
}

std::string NcclVersionName(int code) {
  if (code <= 0) return "";
  if (code >= 10000) return absl::StrCat(code / 10000, ".", code % 10000 / 100, ".", code % 100);
  return absl::StrCat(code / 1000, ".", code % 1000 / 100, ".", code % 100);
}

}  // namespace zpipe::worker
