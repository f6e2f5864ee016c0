// NcclCommunicator: the GPU data path (NCCL), built only with ZPIPE_WITH_NCCL.
//
// P2P: one two-rank NCCL communicator per *direction* between pipeline neighbours (r -> r±1 mod
// p, which covers linear, interleaved and V placements), each with its own CUDA stream, so the
// k-th send a -> b meets the k-th recv on b in issue order, and traffic in one direction never
// waits behind the other (a single shared stream would deadlock a send/send crossing). Traffic
// with other pipeline ranks (p > 3; e.g. a gather on rank 0) goes through one whole-pipeline
// communicator on one stream, in issue order: there, two ranks must not both send to each other
// before either receives. All-reduce: one NCCL communicator per DP group with ncclAvg on a
// dedicated stream. Unique ids go through the KeyValueStore ("<key_prefix>nccl/...").
//
// Stream semantics: every operation first waits (on the GPU) for the work already queued on the
// caller's compute stream (`NcclOptions::compute_stream`, default: the legacy default stream,
// which is LibTorch's default), so the tensor's producer has finished. Wait() returning OK means
// the operation completed on the GPU and the compute stream is ordered after it. The tensor is
// kept referenced until its operation completes, so the caching allocator cannot reuse it early.
//
// Tensors are CUDA tensors on `CommunicatorOptions::device_index`. As with the TCP streams, the
// store must outlive the communicator (Barrier goes through it). Thread-safety as communicator.h
// says: launches are serialised under one lock, so NCCL calls never race on a communicator.
#ifndef ZPIPE_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define ZPIPE_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

struct NcclOptions {
  // The stream the caller computes on; null = the legacy default stream.
  std::function<cudaStream_t()> compute_stream;
};

// Creates the communicators (blocks until every neighbour and DP peer has joined).
// DEADLINE_EXCEEDED when a peer does not show up within `options.timeout`; UNAVAILABLE for
// CUDA / NCCL failures; INVALID_ARGUMENT for inconsistent ranks.
absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store, NcclOptions nccl = {});

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_
