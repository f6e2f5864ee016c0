// The CPU communicator, what every test uses. Two transports (CommunicatorOptions::transport):
//
// - kTcp (default): activations and gradients between pipeline ranks, and the DP group's
//   all-reduces, travel on ZeroPipe's own streams (tcp_p2p.h): one TCP connection per pair of
//   ranks, a message is one write, and the thread that waits for a receive reads its bytes itself.
//   Bootstrapped through the job's KeyValueStore (keys "<key_prefix>p2p/<data_rank>/<rank>" and
//   "<key_prefix>dp-tcp/<pipeline_rank>/<rank>"). No Gloo at all: barriers go through the store
//   (keys "<key_prefix>barrier/<n>/<rank in the job>").
// - kGloo: Gloo's unbound buffers (tag = Gloo slot), Gloo's allreduce and Gloo's barrier, over one
//   Gloo context for the pipeline group and one for the DP group (keys
//   "<key_prefix>pp/<data_rank>/..." and "<key_prefix>dp/<pipeline_rank>/..."). The thread that
//   waits for (or tests) a receive waits on its buffer, woken by Gloo's device loop. Such a rank
//   writes "gloo" where a kTcp rank writes its address, so that a job whose workers disagree fails
//   on every rank naming `zpipe-worker --transport`.
//
// Handles
// are independent (a slow peer never delays another's traffic) and Send never blocks. A handle's
// end time is when the transport finished it, or (Gloo receives) when a Wait or Test first saw it
// complete, so callers that want it exact poll their pending handles (the executor does, between
// actions). All-reduces run in issue order on one dedicated thread, so they overlap the caller's
// compute. Tensors must be CPU tensors.
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
// `store` must outlive the communicator (kTcp's barriers use it).
absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_GLOO_COMMUNICATOR_H_
