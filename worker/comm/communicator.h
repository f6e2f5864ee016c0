// Communicator: the narrow interface the executor and grad sync use to move tensors.
//
// A worker is rank (pipeline_rank, data_rank) of a job with p pipeline ranks and d data-parallel
// replicas. Point-to-point traffic (activations, input gradients) stays inside the worker's
// pipeline group (the p ranks sharing its data_rank); all-reduces run inside its DP group (the d
// ranks sharing its pipeline_rank). Every operation is asynchronous and returns a `CommHandle`.
//
// Ordering contract (docs/design.md "Plan IR", the ordering rule): for every ordered pair (a, b),
// the k-th Send from a to b matches the k-th Recv on b from a. Tags are carried where the transport
// can, but no implementation relies on them (NCCL cannot), so callers must post in matched order.
// All-reduces must be issued in the same order on every member of a DP group.
//
// Thread-safety: Send, Recv, Flush and AllReduceAverage may be called from several threads at
// once (the matched order above is then the callers' to keep); Barrier from one thread at a time.
//
// Implementations, chosen by device in factory/communicator_factory.h: TcpStreamCommunicator
// (CPU, ZeroPipe's TCP streams; NewTcpCommunicator in tcp_communicator.h) and NcclCommunicator
// (CUDA; NewNcclCommunicator in nccl/nccl_communicator.h, built with ZPIPE_WITH_NCCL).
#ifndef ZPIPE_WORKER_COMM_COMMUNICATOR_H_
#define ZPIPE_WORKER_COMM_COMMUNICATOR_H_

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zpipe::worker {

// Where a worker sits in the job and how its communicator bootstraps.
struct CommunicatorOptions {
  int pipeline_rank = 0;
  int pipeline_size = 1;  // p
  int data_rank = 0;
  int data_size = 1;  // d
  // Prepended to every rendezvous key (Assignment.rendezvous_prefix, e.g. "job1/a1/"), so two
  // jobs or two attempts never read each other's addresses.
  std::string key_prefix;
  // Bootstrap limit and per-operation progress limit: a peer that does not show up, or an
  // operation that makes no progress for this long, fails with an error instead of hanging.
  absl::Duration timeout = absl::Seconds(60);
  // TCP streams: the address (host name or IP) to bind and advertise; `iface` (e.g. "eth0") wins
  // when set. Loopback by default, which is what tests use.
  std::string hostname = "127.0.0.1";
  std::string iface;
  // NCCL: the CUDA device ordinal.
  int device_index = 0;
};

// Steady-clock times at which the transport started and finished an operation.
struct CommTimes {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
};

// The pending result of one asynchronous operation. Thread-safe. Destroying a handle does not
// cancel the operation; the communicator keeps the operation's tensor alive until it completes.
class CommHandle {
 public:
  virtual ~CommHandle() = default;

  // Blocks until the operation finished or `timeout` passed. OK once it completed; its error
  // (UNAVAILABLE: peer gone, DEADLINE_EXCEEDED: no progress within the communicator's timeout,
  // CANCELLED: communicator destroyed, INVALID_ARGUMENT: bad call) when it failed;
  // DEADLINE_EXCEEDED with the operation still running when `timeout` passed first (wait again).
  virtual absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) = 0;

  // True once the operation finished, successfully or not. Never blocks. A transport may learn
  // of a completion only by waiting for or testing it (the TCP streams' receives, whose bytes are
  // read on the caller's thread): then Test() turns true once a Wait or Test saw it finish.
  virtual bool Test() = 0;

  // When the transport started and finished the operation (or, where completions are seen by
  // waiting, when a Wait first saw it finish); meaningful once Test() is true.
  virtual CommTimes times() const = 0;
};

class Communicator {
 public:
  // Fails every operation still pending with CANCELLED and closes connections. A collective
  // already running is cancelled where the transport can (the CPU communicator's TCP streams:
  // its peers see the streams close) and otherwise waited for, bounded by the timeout (NCCL).
  virtual ~Communicator() = default;

  virtual int pipeline_rank() const = 0;
  virtual int pipeline_size() const = 0;
  virtual int data_rank() const = 0;
  virtual int data_size() const = 0;

  // Sends `tensor` to pipeline rank `peer`. Returns at once; never blocks the caller's compute
  // (see Flush for when a queued send goes out).
  // The tensor's contents must not change until the handle completes (a non-contiguous tensor is
  // copied first, so then they may). `tag` must be in [0, 2^24).
  virtual std::unique_ptr<CommHandle> Send(const torch::Tensor& tensor, int peer, int tag) = 0;

  // Receives into `into` (defined, contiguous, on this communicator's device; the sender's
  // tensor must have the same number of bytes) from pipeline rank `peer`. Returns at once; the
  // data is there once the handle completes OK.
  virtual std::unique_ptr<CommHandle> Recv(torch::Tensor into, int peer, int tag) = 0;

  // Convenience: allocates `*out` with `shape` and `dtype` on the communicator's device, then
  // Recv(*out, peer, tag).
  std::unique_ptr<CommHandle> Recv(at::IntArrayRef shape, at::ScalarType dtype, int peer, int tag,
                                   torch::Tensor* out);

  // A transport may queue sends and receives to post them off the caller's thread. Queued ones
  // are posted once the caller calls Flush() (handed to the transport's own thread: call it
  // before computing) or waits on any handle of this communicator (posted on the waiting thread,
  // which has nothing better to do). The two transports post at once (the TCP streams write a
  // send on the caller's thread or hand it to their pump; NCCL enqueues on its stream), so they
  // have nothing to flush.
  virtual void Flush() {}

  // In place: `buffer` (contiguous float32 on this communicator's device) becomes the average
  // over the DP group. Runs on the communicator's own thread/stream so it overlaps the caller's
  // compute; all-reduces complete in issue order. `buffer` must not be touched until the handle
  // completes.
  virtual std::unique_ptr<CommHandle> AllReduceAverage(torch::Tensor buffer) = 0;

  // Blocks until every rank of the job (all p * d) has entered the barrier; DEADLINE_EXCEEDED
  // after the timeout. Call it with no collective in flight (e.g. between iterations).
  virtual absl::Status Barrier() = 0;

  // The device tensors live on: kCPU for the TCP streams, the CUDA device for NCCL.
  virtual torch::Device device() const = 0;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_COMMUNICATOR_H_
