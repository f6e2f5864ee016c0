// GlooCommunicator: the CPU data path (Gloo over TCP), the default and what every test uses.
//
// One Gloo context for the pipeline group and one for the DP group, both bootstrapped through the
// job's KeyValueStore (keys "<key_prefix>pp/<data_rank>/..." and "<key_prefix>dp/<pipeline_rank>/
// ..."). P2P runs on unbound buffers (tag = Gloo slot). No thread of ours sits between Gloo and
// the caller: the thread that waits for (or tests) a handle checks its buffer, and Gloo's device
// loop wakes it directly when the bytes are in, so a receive costs one thread hand-off. Handles
// are independent (a slow peer never delays another's traffic) and Send never blocks. A handle's
// end time is when a Wait or Test first saw it complete, so callers that want it exact poll
// their pending handles (the executor does, between actions).
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
