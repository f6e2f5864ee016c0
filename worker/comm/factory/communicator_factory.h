// The data path by device: NCCL for stages on a CUDA device, the TCP streams for CPU stages. What this
// worker binary can do is decided when it is built (a CUDA LibTorch, the NCCL communicator), and
// reported here so jobs are refused with the reason instead of silently running elsewhere.
#ifndef ZPIPE_WORKER_COMM_FACTORY_COMMUNICATOR_FACTORY_H_
#define ZPIPE_WORKER_COMM_FACTORY_COMMUNICATOR_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

// True when this worker was built against a LibTorch with CUDA (torch_cuda).
bool TorchHasCuda();
// True when this worker was built with the NCCL communicator (ZPIPE_WITH_NCCL).
bool NcclAvailable();

// NCCL on CUDA device `device` (options.device_index is set from it), the TCP streams for kCPU.
// FAILED_PRECONDITION naming what is missing for a CUDA device on a build without NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> NewCommunicator(torch::Device device,
                                                              CommunicatorOptions options,
                                                              KeyValueStore& store);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_FACTORY_COMMUNICATOR_FACTORY_H_
