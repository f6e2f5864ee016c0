// TcpStreamCommunicator: the CPU communicator, what every test uses: ZeroPipe's own TCP streams
// (tcp_p2p.h). Made by NewTcpCommunicator below, or by the factory for a CPU stage.
//
// Activations and gradients between pipeline ranks travel on one TCP connection per pair of
// ranks: a message is one write, and the thread that waits for a receive reads its bytes itself.
// The DP group's all-reduces run on the group's own streams (a swap for two replicas, a ring for
// more). Both are bootstrapped through the job's KeyValueStore (keys
// "<key_prefix>p2p/<data_rank>/<rank>" and "<key_prefix>dp-tcp/<pipeline_rank>/<rank>"). Barriers
// go through the store (keys "<key_prefix>barrier/<n>/<rank in the job>"), not the streams, whose
// messages must match the posted receives in order.
//
// Handles are independent (a slow peer never delays another's traffic) and Send never blocks. A
// handle's end time is when the transport finished it. All-reduces run in issue order on one
// dedicated thread, so they overlap the caller's compute. Tensors must be CPU tensors.
// Thread-safety as communicator.h says: each direction of each pair has its own lock, and the
// all-reduce queue one more.
//
// There is no Gloo path: LibTorch comes from the PyTorch wheel, which carries Gloo inside
// libtorch_cpu but ships no Gloo headers, and a second Gloo (Debian's) in the same process is what
// has crashed other projects. PyTorch over Gloo is what `scripts/bench peer` compares against.
#ifndef ZPIPE_WORKER_COMM_TCP_COMMUNICATOR_H_
#define ZPIPE_WORKER_COMM_TCP_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

// Connects to every member of both groups; blocks until they all have joined. DEADLINE_EXCEEDED
// naming the missing rendezvous keys when a peer does not show up within `options.timeout`;
// UNAVAILABLE when a connection fails; INVALID_ARGUMENT for inconsistent ranks and sizes.
// `store` must outlive the communicator (barriers use it).
absl::StatusOr<std::unique_ptr<Communicator>> NewTcpCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_TCP_COMMUNICATOR_H_
