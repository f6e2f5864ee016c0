#include "worker/executor/device_timer.h"

#include "absl/strings/str_cat.h"

#if ZPIPE_WITH_CUDA_RUNTIME
#include <cuda_runtime_api.h>
#endif

namespace zpipe::worker {
namespace {

using Clock = std::chrono::steady_clock;

class HostTimer final : public DeviceTimer {
 public:
  absl::Status Begin() override {
    marks_.clear();
    return absl::OkStatus();
  }
  int Mark() override {
    marks_.push_back(Clock::now());
    return static_cast<int>(marks_.size()) - 1;
  }
  absl::StatusOr<std::vector<Time>> Resolve() override { return marks_; }
  bool deferred() const override { return false; }

 private:
  std::vector<Time> marks_;
};

#if ZPIPE_WITH_CUDA_RUNTIME
absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::UnavailableError(absl::StrCat("CUDA timer: ", what, ": ", cudaGetErrorString(e)));
}

class CudaTimer final : public DeviceTimer {
 public:
  explicit CudaTimer(int device) : device_(device) {}
  ~CudaTimer() override {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }

  absl::Status Begin() override {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) return CudaError(e, "set device");
    used_ = 0;
    // The device goes idle (the previous iteration's optimizer step has ended anyway), so the
    // reference event completes as soon as it is recorded: at the host time read right after.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
      return CudaError(e, "synchronize");
    }
    absl::StatusOr<cudaEvent_t> ref = Next();
    if (!ref.ok()) return ref.status();
    if (cudaError_t e = cudaEventRecord(*ref, nullptr); e != cudaSuccess) {
      return CudaError(e, "record");
    }
    if (cudaError_t e = cudaEventSynchronize(*ref); e != cudaSuccess) {
      return CudaError(e, "synchronize");
    }
    host_ref_ = Clock::now();
    ref_ = *ref;
    error_ = absl::OkStatus();
    return absl::OkStatus();
  }

  int Mark() override {
    absl::StatusOr<cudaEvent_t> ev = Next();
    if (!ev.ok()) {
      error_.Update(ev.status());
    } else if (cudaError_t e = cudaEventRecord(*ev, nullptr); e != cudaSuccess) {
      error_.Update(CudaError(e, "record"));
    }
    return static_cast<int>(used_) - 2;  // mark k is pool_[k + 1]; pool_[0] is the reference
  }

  absl::StatusOr<std::vector<Time>> Resolve() override {
    if (!error_.ok()) return error_;
    std::vector<Time> out;
    if (used_ <= 1) return out;
    if (cudaError_t e = cudaEventSynchronize(pool_[used_ - 1]); e != cudaSuccess) {
      return CudaError(e, "synchronize");
    }
    out.reserve(used_ - 1);
    for (size_t k = 1; k < used_; ++k) {
      float ms = 0;
      if (cudaError_t e = cudaEventElapsedTime(&ms, ref_, pool_[k]); e != cudaSuccess) {
        return CudaError(e, "elapsed time");
      }
      out.push_back(host_ref_ + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double, std::milli>(ms)));
    }
    return out;
  }

  bool deferred() const override { return true; }

 private:
  absl::StatusOr<cudaEvent_t> Next() {
    if (used_ == pool_.size()) {
      cudaEvent_t e;
      if (cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) {
        return CudaError(err, "create event");
      }
      pool_.push_back(e);
    }
    return pool_[used_++];
  }

  int device_;
  std::vector<cudaEvent_t> pool_;  // reused across iterations
  size_t used_ = 0;
  cudaEvent_t ref_ = nullptr;
  Time host_ref_;
  absl::Status error_;
};
#endif

}  // namespace

std::unique_ptr<DeviceTimer> NewHostTimer() { return std::make_unique<HostTimer>(); }

absl::StatusOr<std::unique_ptr<DeviceTimer>> NewCudaTimer(torch::Device device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA timer: ", device.str(), " is not a CUDA device"));
  }
#if ZPIPE_WITH_CUDA_RUNTIME
  return std::unique_ptr<DeviceTimer>(
      std::make_unique<CudaTimer>(device.has_index() ? device.index() : 0));
#else
  return absl::UnimplementedError(
      "CUDA timer: this worker was built without the CUDA runtime (no CUDA toolkit found)");
#endif
}

absl::StatusOr<std::unique_ptr<DeviceTimer>> NewDeviceTimer(torch::Device device) {
  if (device.is_cuda()) return NewCudaTimer(device);
  return NewHostTimer();
}

}  // namespace zpipe::worker
