#include "worker/comm/communicator.h"

namespace zpipe::worker {

std::unique_ptr<CommHandle> Communicator::Recv(at::IntArrayRef shape, at::ScalarType dtype,
                                               int peer, int tag, torch::Tensor* out) {
  *out = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device()));
  return Recv(*out, peer, tag);
}

}  // namespace zpipe::worker
