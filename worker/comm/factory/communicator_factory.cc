#include "worker/comm/factory/communicator_factory.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_communicator.h"

#if ZPIPE_WITH_NCCL
#include "worker/comm/nccl/nccl_communicator.h"
#endif

namespace zpipe::worker {

bool TorchHasCuda() {
#if ZPIPE_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

bool NcclAvailable() {
#if ZPIPE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> NewCommunicator(torch::Device device,
                                                              CommunicatorOptions options,
                                                              KeyValueStore& store) {
  if (!device.is_cuda()) return NewTcpCommunicator(options, store);
#if ZPIPE_WITH_NCCL
  options.device_index = device.has_index() ? device.index() : 0;
  return NewNcclCommunicator(options, store);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "no data path for ", device.str(), ": this worker was built without the NCCL communicator"));
#endif
}

}  // namespace zpipe::worker
