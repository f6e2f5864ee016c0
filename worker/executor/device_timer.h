// DeviceTimer: when the compute actions of an iteration ran on the device that ran them.
//
// On the CPU a compute action runs while the executor's thread waits, so the host clock around
// the call is the action's time. On a GPU the call only queues kernels: the host clock would time
// the launches, and the executed timeline and the bubble would be the host's, not the GPU's. The
// CUDA timer records an event on the compute stream (the legacy default stream, LibTorch's
// default) at each mark and maps device time to the host clock once per iteration: Begin waits
// for the device to go idle and records a reference event at a known host time; Resolve waits for
// the last mark and returns every mark as host time (reference + elapsed device time). No host
// synchronisation happens between Begin and Resolve.
//
// Thread-safety: one thread (the executor's) uses a timer.
#ifndef ZPIPE_WORKER_EXECUTOR_DEVICE_TIMER_H_
#define ZPIPE_WORKER_EXECUTOR_DEVICE_TIMER_H_

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace zpipe::worker {

class DeviceTimer {
 public:
  using Time = std::chrono::steady_clock::time_point;
  virtual ~DeviceTimer() = default;

  // Starts an iteration: forgets earlier marks.
  virtual absl::Status Begin() = 0;
  // Records "now" in the device's order of work; returns the mark's index in this iteration.
  virtual int Mark() = 0;
  // The host-clock time of every mark since Begin, in mark order; waits for the device to reach
  // the last one.
  virtual absl::StatusOr<std::vector<Time>> Resolve() = 0;
  // True when marks are resolved later (device time), false when Mark reads the host clock.
  virtual bool deferred() const = 0;
};

// Host clock at each mark (CPU stages).
std::unique_ptr<DeviceTimer> NewHostTimer();

// CUDA events on `device`'s legacy default stream. UNIMPLEMENTED when the worker was built without
// the CUDA runtime; FAILED_PRECONDITION when `device` is not a CUDA device.
absl::StatusOr<std::unique_ptr<DeviceTimer>> NewCudaTimer(torch::Device device);

// The timer for stages on `device`: CUDA events for a CUDA device, the host clock otherwise.
absl::StatusOr<std::unique_ptr<DeviceTimer>> NewDeviceTimer(torch::Device device);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_DEVICE_TIMER_H_
