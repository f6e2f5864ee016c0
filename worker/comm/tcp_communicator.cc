#include "worker/comm/tcp_communicator.h"

#include <pthread.h>

#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/completion.h"
#include "worker/comm/peer_error.h"
#include "worker/comm/tcp_p2p.h"

namespace zpipe::worker {
namespace {

// Names the calling thread (up to 15 characters) so `top -H`, `perf sched` and debuggers tell
// the communicator's threads apart.
void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

using internal::Completion;

constexpr int kMaxTag = 1 << 24;

struct ReduceOp {
  torch::Tensor buffer;
  std::shared_ptr<Completion> done;
};

// The Communicator over ZeroPipe's TCP streams; its contract is tcp_communicator.h's.
class TcpStreamCommunicator final : public Communicator {
 public:
  TcpStreamCommunicator(const CommunicatorOptions& options, KeyValueStore& store,
                  std::unique_ptr<internal::TcpP2p> tcp, std::unique_ptr<internal::TcpP2p> dp_tcp)
      : options_(options), store_(store), tcp_(std::move(tcp)), dp_tcp_(std::move(dp_tcp)) {
    if (options.data_size > 1) reduce_thread_ = std::thread([this] { RunReduces(); });
  }

  ~TcpStreamCommunicator() override {
    // A running all-reduce is cancelled rather than waited for (its peers see the streams close).
    if (dp_tcp_ != nullptr) dp_tcp_->Shutdown();
    {
      absl::MutexLock lock(&reduce_mu_);
      reduce_stop_ = true;  // wakes RunReduces (its Await)
    }
    if (reduce_thread_.joinable()) reduce_thread_.join();
    tcp_.reset();
  }

  int pipeline_rank() const override { return options_.pipeline_rank; }
  int pipeline_size() const override { return options_.pipeline_size; }
  int data_rank() const override { return options_.data_rank; }
  int data_size() const override { return options_.data_size; }
  torch::Device device() const override { return torch::kCPU; }

  void Flush() override {}  // a send is on the wire (or with the pump) when Send returns

  std::unique_ptr<CommHandle> Send(const torch::Tensor& tensor, int peer, int tag) override {
    if (absl::Status s = CheckP2p(tensor, peer, tag, "send"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    // contiguous() returns `tensor` itself when it already is, so no copy in the common case.
    return tcp_->Send(tensor.contiguous(), peer, tag);
  }

  std::unique_ptr<CommHandle> Recv(torch::Tensor into, int peer, int tag) override {
    if (absl::Status s = CheckP2p(into, peer, tag, "recv"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    if (!into.is_contiguous()) {
      return internal::FinishedHandle(
          absl::InvalidArgumentError("recv: the destination tensor must be contiguous"));
    }
    return tcp_->Recv(std::move(into), peer, tag);
  }

  std::unique_ptr<CommHandle> AllReduceAverage(torch::Tensor buffer) override {
    if (!buffer.defined() || buffer.scalar_type() != torch::kFloat32 || !buffer.is_contiguous() ||
        !buffer.device().is_cpu()) {
      return internal::FinishedHandle(absl::InvalidArgumentError(
          "all-reduce: the buffer must be a defined, contiguous float32 CPU tensor"));
    }
    auto done = std::make_shared<Completion>();
    if (options_.data_size == 1 || buffer.numel() == 0) {  // the average of one is itself
      done->Finish(absl::OkStatus());
      return internal::MakeHandle(done);
    }
    {
      absl::MutexLock lock(&reduce_mu_);
      if (reduce_stop_) {
        done->Finish(absl::CancelledError("all-reduce: communicator is shutting down"));
      } else {
        reduce_queue_.push_back({std::move(buffer), done});  // wakes RunReduces (its Await)
      }
    }
    return internal::MakeHandle(done);
  }

  absl::Status Barrier() override { return StoreBarrier(); }

 private:
  // The streams' barrier goes through the rendezvous store rather than the streams, whose
  // messages must match the posted receives in order: a barrier may be called with sends and
  // receives pending. Each rank sets "barrier/<n>/<rank in the job>" and waits for all p * d.
  absl::Status StoreBarrier() {
    const int size = options_.pipeline_size * options_.data_size;
    const int me = options_.data_rank * options_.pipeline_size + options_.pipeline_rank;
    const std::string prefix = absl::StrCat(options_.key_prefix, "barrier/", barriers_++, "/");
    if (absl::Status s = store_.Set(absl::StrCat(prefix, me), ""); !s.ok()) return s;
    std::vector<std::string> keys;
    for (int g = 0; g < size; ++g) keys.push_back(absl::StrCat(prefix, g));
    auto entered = store_.Wait(keys, absl::Now() + options_.timeout);
    if (entered.ok()) return absl::OkStatus();
    if (!absl::IsDeadlineExceeded(entered.status())) return entered.status();
    std::vector<std::string> missing;
    for (int g : UnsetKeys(store_, keys)) {
      missing.push_back(
          absl::StrCat("(", g % options_.pipeline_size, ", ", g / options_.pipeline_size, ")"));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "barrier: rank (", options_.pipeline_rank, ", ", options_.data_rank, ") waited ",
        absl::FormatDuration(options_.timeout), " for (pipeline, data) rank",
        missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, " "), " to enter"));
  }

  absl::Status CheckP2p(const torch::Tensor& t, int peer, int tag, absl::string_view what) const {
    if (options_.pipeline_size == 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the pipeline group has a single rank"));
    }
    if (peer < 0 || peer >= options_.pipeline_size || peer == options_.pipeline_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": peer ", peer, " is not another rank of a pipeline of ", options_.pipeline_size));
    }
    if (tag < 0 || tag >= kMaxTag) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tag ", tag, " outside [0, 2^24)"));
    }
    if (!t.defined() || !t.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": needs a defined CPU tensor"));
    }
    return absl::OkStatus();
  }

  void RunReduces() {
    NameThisThread("zp-reduce");
    uint32_t tag = 0;
    for (;;) {
      ReduceOp op;
      {
        absl::MutexLock lock(&reduce_mu_);
        reduce_mu_.Await(absl::Condition(this, &TcpStreamCommunicator::ReduceWorkOrStop));
        if (reduce_stop_) {
          for (ReduceOp& left : reduce_queue_) {
            left.done->Finish(
                absl::CancelledError("all-reduce: communicator destroyed before it ran"));
          }
          reduce_queue_.clear();
          return;
        }
        op = std::move(reduce_queue_.front());
        reduce_queue_.pop_front();
      }
      op.done->MarkStarted();
      absl::Status status = internal::AllReduceAverage(*dp_tcp_, op.buffer, tag++,
                                                       reduce_scratch_, options_.timeout);
      if (!status.ok()) {
        status = Reworded(status, absl::StrCat("all-reduce of ", op.buffer.numel(),
                                               " floats in the data-parallel group of pipeline "
                                               "rank ",
                                               options_.pipeline_rank, ": ", status.message()));
      }
      op.done->Finish(std::move(status));
    }
  }

  bool ReduceWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(reduce_mu_) {
    return reduce_stop_ || !reduce_queue_.empty();
  }

  const CommunicatorOptions options_;
  KeyValueStore& store_;  // barriers on the streams
  // Barriers so far (every rank calls them in the same order). Barrier() is called from one
  // thread at a time (the Communicator contract: with no collective in flight).
  int barriers_ = 0;
  // Point-to-point on the pipeline group's streams (null when p = 1).
  std::unique_ptr<internal::TcpP2p> tcp_;
  // All-reduces on the DP group's streams (null when d = 1).
  std::unique_ptr<internal::TcpP2p> dp_tcp_;
  torch::Tensor reduce_scratch_;  // only the reduce thread touches it

  // The all-reduce queue, between the callers of AllReduceAverage and the reduce thread.
  absl::Mutex reduce_mu_;
  bool reduce_stop_ ABSL_GUARDED_BY(reduce_mu_) = false;
  std::deque<ReduceOp> reduce_queue_ ABSL_GUARDED_BY(reduce_mu_);
  std::thread reduce_thread_;
};

// A group's TCP streams (`rank` of `size`, rendezvous keys under `prefix`); null for a single rank.
absl::StatusOr<std::unique_ptr<internal::TcpP2p>> ConnectStreams(const CommunicatorOptions& o,
                                                                 KeyValueStore& store,
                                                                 absl::string_view group, int rank,
                                                                 int size, std::string prefix) {
  if (size <= 1) return nullptr;
  internal::TcpP2pOptions to;
  to.group = std::string(group);
  to.rank = rank;
  to.size = size;
  to.key_prefix = std::move(prefix);
  to.hostname = o.hostname;
  to.iface = o.iface;
  to.timeout = o.timeout;
  return internal::TcpP2p::Connect(to, store);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewTcpCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store) {
  const CommunicatorOptions& o = options;
  if (o.pipeline_size < 1 || o.data_size < 1 || o.pipeline_rank < 0 ||
      o.pipeline_rank >= o.pipeline_size || o.data_rank < 0 || o.data_rank >= o.data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator: rank (", o.pipeline_rank, ", ", o.data_rank,
                     ") does not fit p = ", o.pipeline_size, ", d = ", o.data_size));
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("communicator: the timeout must be positive");
  }
  // Every rank connects its pipeline group before its DP group, so a rank
  // waiting in its DP group only waits for ranks that are done with (or can finish) their own
  // pipeline group, and the phases cannot deadlock.
  auto tcp = ConnectStreams(o, store, "pipeline", o.pipeline_rank, o.pipeline_size,
                            absl::StrCat(o.key_prefix, "p2p/", o.data_rank, "/"));
  if (!tcp.ok()) return tcp.status();
  auto dp_tcp = ConnectStreams(o, store, "data-parallel", o.data_rank, o.data_size,
                               absl::StrCat(o.key_prefix, "dp-tcp/", o.pipeline_rank, "/"));
  if (!dp_tcp.ok()) return dp_tcp.status();
  return std::unique_ptr<Communicator>(
      new TcpStreamCommunicator(options, store, *std::move(tcp), *std::move(dp_tcp)));
}

}  // namespace zpipe::worker
