// Internal to worker/comm: ZeroPipe's own streams for the CPU data path, one TCP connection per
// pair of ranks of a group: activations and gradients between pipeline ranks, and the DP group's
// all-reduces (AllReduceAverage below).
//
// Why not Gloo's unbound buffers: a Gloo send is two socket writes (a ready notice, then the
// payload, once the peer's own notice came back), and a receive is read by Gloo's device loop,
// which then wakes the thread waiting for it. Inside a pipeline on two cores that hand-over took
// 130-300 us per hop (docs/performance.md "Runtime performance"), most of the measured bubble's excess over the
// plan, and a 250 KB all-reduce between two replicas 0.9 ms. Here a message is one write of a
// 16-byte header and the payload, issued on the sender's own thread, and the bytes are read by the
// thread that waits for them, straight into the receive's tensor: one wake-up from the kernel, no
// thread of ours in between.
//
// The stream follows the Communicator ordering contract: the k-th send from a to b is the k-th
// receive on b from a. The header carries the tag and the byte count, and a receive whose message
// has another tag or size fails (the plan's sends and receives are out of matched order, a bug
// worth a clear error rather than a silent mix-up), as does every later operation on that pair.
//
// Progress: a send writes what the socket takes at once (without blocking); what is left, and any
// send over 1 MiB, is written by one pump thread (`zp-p2p-pump`) as the peer reads. Receives
// progress whenever a thread waits for or tests a receive handle of the group, or waits for a
// send: it reads every pair that has a receive posted, so bytes never wait for a particular
// handle's turn, and a rank blocked on one peer keeps draining the others (no cycle of ranks
// waiting on each other's full sockets).
#ifndef ZPIPE_WORKER_COMM_TCP_P2P_H_
#define ZPIPE_WORKER_COMM_TCP_P2P_H_

#include <torch/torch.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker::internal {

// What a worker of an earlier release started with `--transport gloo` publishes where the
// streams' ranks publish their addresses: a job that mixes such a worker with this release's fails
// with the reason instead of timing out.
inline constexpr char kGlooP2pMarker[] = "gloo";

struct TcpP2pOptions {
  // What the group is, for messages: "pipeline" (activations) or "data-parallel" (all-reduces).
  std::string group = "pipeline";
  int rank = 0;
  int size = 1;
  // Rendezvous keys are "<key_prefix><rank>", each holding "host port".
  std::string key_prefix;
  // The address to listen on and advertise (IPv4 or IPv6 literal, or a host name); `iface`
  // (e.g. "eth0") wins when set.
  std::string hostname = "127.0.0.1";
  std::string iface;
  // Connection limit, and how long a receive may wait without a byte arriving before it fails.
  absl::Duration timeout = absl::Seconds(60);
};

class TcpP2p {
 public:
  // Listens, publishes its address, connects to every other rank of the group and waits for
  // every one to connect back. DEADLINE_EXCEEDED naming the missing ranks when they do not show up
  // within the timeout; UNAVAILABLE when the address cannot be used.
  static absl::StatusOr<std::unique_ptr<TcpP2p>> Connect(const TcpP2pOptions& options,
                                                         KeyValueStore& store);

  // Fails every pending operation with CANCELLED, wakes their waiters and closes the streams (the
  // peers see their pending receives fail). Handles may outlive it.
  ~TcpP2p();

  // As Communicator::Send and Recv (arguments already checked by the caller: a peer of the group
  // other than this rank, a defined contiguous CPU tensor).
  std::unique_ptr<CommHandle> Send(torch::Tensor tensor, int peer, int tag);
  std::unique_ptr<CommHandle> Recv(torch::Tensor into, int peer, int tag);

  // What the destructor does, early: every pending and later operation fails with CANCELLED and
  // the streams close. For a thread still using this object while its owner shuts down.
  void Shutdown();

  int rank() const;
  int size() const;

  struct State;

 private:
  explicit TcpP2p(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// In place: `buffer` (contiguous float32 CPU) becomes the average over the group, identical to
// the last bit on every rank. Two ranks swap their buffers and each adds the other's (a + b is
// b + a); more run a ring: reduce-scatter (each chunk summed along the ring and divided by its
// owner), then all-gather of the owners' chunks. `seq` numbers the all-reduce (the same on every
// rank: all-reduces are issued in the same order) and tags its messages. `scratch` is reused
// between calls. Every wait is bounded by `timeout`.
absl::Status AllReduceAverage(TcpP2p& group, torch::Tensor buffer, uint32_t seq,
                              torch::Tensor& scratch, absl::Duration timeout);

}  // namespace zpipe::worker::internal

#endif  // ZPIPE_WORKER_COMM_TCP_P2P_H_
