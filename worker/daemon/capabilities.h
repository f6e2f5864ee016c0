// What this worker process can run, as it tells the coordinator when it registers
// (v1::WorkerCapabilities; the coordinator matches jobs against it in coordinator/worker_match.h).
//
// Two halves: ProbeRuntime() asks LibTorch, and in builds with the NCCL communicator the CUDA
// runtime and NCCL, what they are and which devices they see; BuildCapabilities() turns those
// facts into the message. The probe runs once per process (it may initialise the CUDA runtime,
// never a tensor); the second half is pure, so tests can describe any machine.
#ifndef ZPIPE_WORKER_DAEMON_CAPABILITIES_H_
#define ZPIPE_WORKER_DAEMON_CAPABILITIES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

// What one process found out about its runtime; version codes are the libraries' own integers.
struct RuntimeFacts {
  struct Device {
    int index = 0;
    std::string name;
    uint64_t total_memory_bytes = 0;
  };
  std::string libtorch_version;     // TORCH_VERSION, e.g. "1.13.0"
  bool torch_cuda = false;          // LibTorch was built with the CUDA runtime
  int torch_cudart_version = 0;     // the CUDART_VERSION LibTorch was built with; 0 = none
  int torch_device_count = 0;       // CUDA devices LibTorch sees
  bool nccl = false;                // built with ZeroPipe's NCCL communicator (ZPIPE_WITH_NCCL)
  int nccl_version = 0;             // ncclGetVersion; 0 = unknown
  int cudart_version = 0;           // cudaRuntimeGetVersion of the runtime loaded; 0 = unknown
  std::vector<Device> devices;      // every device the CUDA runtime lists (NCCL builds)
  std::vector<std::string> errors;  // probes that failed, each "call: why"
};

// Probes this process. Never fails: what could not be found is left at its zero value and the
// reason appended to `errors`. Thread-safe; takes milliseconds (CUDA runtime start-up aside).
RuntimeFacts ProbeRuntime();

// The message registered with the coordinator. Pure.
v1::WorkerCapabilities BuildCapabilities(const RuntimeFacts& facts);

// One line for logs, e.g. "LibTorch 1.13.0 CPU-only, NCCL 2.28.9, CUDA runtime 13.0, 0 CUDA
// devices seen by LibTorch (cudaGetDeviceCount: no CUDA-capable device is detected)".
std::string DescribeCapabilities(const v1::WorkerCapabilities& capabilities);

// CUDA's version integer as "MAJOR.MINOR" (12010 -> "12.1"); "" for 0.
std::string CudaVersionName(int version);
// NCCL's version code as "MAJOR.MINOR.PATCH" (22809 -> "2.28.9"; before 2.9 the code was
// MAJOR*1000 + MINOR*100 + PATCH: 2708 -> "2.7.8"); "" for 0.
std::string NcclVersionName(int code);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_CAPABILITIES_H_
