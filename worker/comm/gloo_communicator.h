// GlooCommunicator: the CPU data path (Gloo over TCP), the default and what every test uses.
//
// One Gloo context for the pipeline group and one for the DP group, both bootstrapped through the
// job's KeyValueStore (keys "<key_prefix>pp/<data_rank>/..." and "<key_prefix>dp/<pipeline_rank>/
// ..."). P2P runs on unbound buffers (tag = Gloo slot), completed by one waiter thread per peer
// and direction, so a slow peer never delays another peer's traffic and Send never blocks.
// All-reduces run in issue order on one dedicated thread, so they overlap the caller's compute.
// Tensors must be CPU tensors.
#ifndef ZPIPE_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define ZPIPE_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

// Connects to every member of both groups; blocks until they all have joined. DEADLINE_EXCEEDED
// naming the missing rendezvous keys when a peer does not show up within `options.timeout`;
// UNAVAILABLE when a connection fails; INVALID_ARGUMENT for inconsistent ranks and sizes.
// `store` is only used during this call.
absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_GLOO_COMMUNICATOR_H_
