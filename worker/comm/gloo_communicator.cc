#include "worker/comm/gloo_communicator.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/comm/completion.h"
#include "worker/comm/gloo_store.h"
#include "worker/comm/tcp_p2p.h"

namespace zpipe::worker {
namespace {

// Names the calling thread (up to 15 characters) so `top -H`, `perf sched` and debuggers tell
// the communicator's threads apart.
void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

using internal::Completion;

// Gloo's own collectives use slot prefixes 0x01..0x08 in the top byte; P2P gets its own.
constexpr uint64_t kP2pSlotBase = uint64_t{0x40} << 56;
constexpr int kMaxTag = 1 << 24;

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Gloo reports every failure as an exception; its timeouts say so in the message.
absl::Status FromGloo(const std::exception& e, absl::string_view what) {
  const std::string msg = e.what();
  const std::string lower = absl::AsciiStrToLower(msg);
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": no progress within the communicator timeout (is the peer alive?): ", msg));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", msg));
}

struct P2pOp {
  bool is_send = false;
  int peer = 0;
  int tag = 0;
  torch::Tensor tensor;  // keeps the memory under `buffer` alive
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  // Receives only (waited on by their caller, see RecvHandle).
  std::mutex mu;
  bool waiting = false;  // a thread is in the buffer's waitRecv (guarded by mu)
  // When a thread first waited for it: the progress timeout runs from there (guarded by mu).
  std::optional<std::chrono::steady_clock::time_point> first_wait;

  std::string Describe() const {
    return absl::StrCat(is_send ? "send to" : "recv from", " pipeline rank ", peer, " (tag ", tag,
                        ", ", tensor.nbytes(), " bytes)");
  }
};

// Ops whose transport state may still reference their buffer (failed or aborted). Freed only
// after the contexts are gone, so Gloo never writes into freed memory.
class Graveyard {
 public:
  void Bury(std::shared_ptr<P2pOp> op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<P2pOp>> ops_;
};

// Completes the ops of one (peer, direction) in posting order. Within a pair the plan's order is
// the wire order, so waiting in order never delays an op that has already completed behind
// another; different peers get different waiters and never delay each other.
class PeerWaiter {
 public:
  PeerWaiter(std::chrono::milliseconds timeout, Graveyard& graveyard)
      : timeout_(timeout), graveyard_(graveyard), thread_([this] { Run(); }) {}

  ~PeerWaiter() { Stop(); }

  void Push(std::shared_ptr<P2pOp> op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stop_) {
        queue_.push_back(std::move(op));
        cv_.notify_one();
        return;
      }
    }
    op->done->Finish(absl::CancelledError("communicator is shutting down"));
    graveyard_.Bury(std::move(op));
  }

  // Aborts the op being waited for, cancels the queued ones and joins the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ && !thread_.joinable()) return;
      stop_ = true;
      if (current_ != nullptr) {
        if (current_->is_send) {
          current_->buffer->abortWaitSend();
        } else {
          current_->buffer->abortWaitRecv();
        }
      }
      for (auto& op : queue_) {
        op->done->Finish(absl::CancelledError(
            absl::StrCat(op->Describe(), ": communicator destroyed before it completed")));
        graveyard_.Bury(std::move(op));
      }
      queue_.clear();
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    NameThisThread("zp-send-wait");
    for (;;) {
      std::shared_ptr<P2pOp> op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        op = std::move(queue_.front());
        queue_.pop_front();
        current_ = op;
      }
      absl::Status status;
      try {
        const bool completed =
            op->is_send ? op->buffer->waitSend(timeout_) : op->buffer->waitRecv(timeout_);
        if (!completed) {
          status = absl::CancelledError(
              absl::StrCat(op->Describe(), ": communicator destroyed before it completed"));
        }
      } catch (const std::exception& e) {
        status = FromGloo(e, op->Describe());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        current_.reset();
      }
      const bool failed = !status.ok();
      op->done->Finish(std::move(status));
      if (failed) graveyard_.Bury(std::move(op));
    }
  }

  const std::chrono::milliseconds timeout_;
  Graveyard& graveyard_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::shared_ptr<P2pOp>> queue_;
  std::shared_ptr<P2pOp> current_;
  std::thread thread_;  // last: starts after the members it uses
};

// Hands sends and receives to Gloo off the caller's thread. Posting is a socket write: a send's
// payload when the peer's receive is already posted, a receive's ready notice to its peer. On
// loopback the kernel delivers it to the peer inside the write, and waking the peer's threads
// makes it 0.1 to 0.2 ms on our 2-core CI machines; the executor posts one or two per action,
// and done on its thread that was 143 us between two actions (74 us now; README "Runtime
// performance"). So the caller queues; Flush (called before computing) hands the queue to the
// poster's thread, one wake-up for all of it, and a caller about to block on a handle posts what is
// queued itself (Drain): it has nothing better to do, and a send on the critical path then goes
// out without waiting for another thread to wake. Either way in queue order.
class Poster {
 public:
  using Fn = std::function<void(std::shared_ptr<P2pOp>)>;
  // `post` posts one op (on the poster's thread or a draining caller's); `cancel` ends an op
  // that is never posted.
  Poster(Fn post, Fn cancel)
      : post_(std::move(post)), cancel_(std::move(cancel)), thread_([this] { Run(); }) {}
  ~Poster() { Stop(); }

  // Queues `op` for the next Flush or Drain. False once stopped (the op was not queued).
  bool Push(std::shared_ptr<P2pOp> op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    queue_.push_back(std::move(op));
    return true;
  }

  // Hands what is queued to the poster's thread: one wake-up for every op queued since the last.
  void Flush() {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty() || !idle_ || woken_) return;
    woken_ = true;
    cv_.notify_one();
  }

  // Posts what is queued on the caller's thread.
  void Drain() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || queue_.empty()) return;
      ++draining_;
    }
    // Taking ops from the queue and posting them under post_mu_ keeps the queue's order on the
    // wire: ops with the same tag to one peer match in posting order.
    std::unique_lock<std::mutex> posting(post_mu_);
    std::deque<std::shared_ptr<P2pOp>> ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stop_) ops.swap(queue_);
    }
    for (auto& op : ops) post_(std::move(op));
    posting.unlock();
    std::lock_guard<std::mutex> lock(mu_);
    if (--draining_ == 0) cv_.notify_all();
  }

  // Posts nothing more: the queued ops are cancelled, the thread joined, and no caller is still
  // posting when it returns (the post function may then go away).
  void Stop() {
    std::deque<std::shared_ptr<P2pOp>> left;
    {
      std::unique_lock<std::mutex> lock(mu_);
      stop_ = true;
      left.swap(queue_);
      cv_.notify_all();
      cv_.wait(lock, [&] { return draining_ == 0; });
    }
    if (thread_.joinable()) thread_.join();
    for (auto& op : left) cancel_(std::move(op));
  }

 private:
  void Run() {
    NameThisThread("zp-poster");
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      while (!stop_ && queue_.empty()) {
        idle_ = true;
        cv_.wait(lock);
        idle_ = false;
        woken_ = false;
      }
      if (stop_) return;
      ++draining_;
      lock.unlock();
      {
        std::lock_guard<std::mutex> posting(post_mu_);
        std::shared_ptr<P2pOp> op;
        {
          std::lock_guard<std::mutex> relock(mu_);
          if (!stop_ && !queue_.empty()) {  // a Drain may have taken it meanwhile
            op = std::move(queue_.front());
            queue_.pop_front();
          }
        }
        if (op != nullptr) post_(std::move(op));
      }
      lock.lock();
      if (--draining_ == 0 && stop_) cv_.notify_all();
    }
  }

  const Fn post_, cancel_;
  std::mutex post_mu_;  // held while taking ops from the queue and posting them; before mu_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool idle_ = false;   // the thread waits on cv_
  bool woken_ = false;  // notified and not yet running
  int draining_ = 0;    // threads taking ops from the queue to post them
  std::deque<std::shared_ptr<P2pOp>> queue_;
  std::thread thread_;  // last: starts after the members it uses
};

using SteadyClock = std::chrono::steady_clock;

// Ends direct waits at their caller's deadline. Gloo's waitRecv cannot be given a short timeout:
// a timed-out wait fails every pair of the context. So a caller waits with the progress timeout,
// and this thread aborts the wait (abortWaitRecv, which Gloo provides for exactly this) when the
// caller's own deadline comes first. It wakes at the earliest armed deadline, or every kTick.
class WaitWatchdog {
 public:
  WaitWatchdog() : thread_([this] { Run(); }) {}
  ~WaitWatchdog() { Stop(); }

  // Aborts `buffer`'s waitRecv at `deadline` unless disarmed first. False once stopped.
  bool Arm(gloo::transport::UnboundBuffer* buffer, SteadyClock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    armed_.push_back({buffer, deadline});
    if (deadline < wake_) {
      wake_ = deadline;
      cv_.notify_one();
    }
    return true;
  }

  void Disarm(gloo::transport::UnboundBuffer* buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(armed_.begin(), armed_.end(),
                           [&](const Armed& a) { return a.buffer == buffer; });
    if (it != armed_.end()) armed_.erase(it);
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr auto kTick = std::chrono::milliseconds(50);
  struct Armed {
    gloo::transport::UnboundBuffer* buffer;
    SteadyClock::time_point deadline;
  };

  void Run() {
    NameThisThread("zp-watchdog");
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      const auto now = SteadyClock::now();
      auto next = now + kTick;
      for (auto it = armed_.begin(); it != armed_.end();) {
        if (it->deadline <= now) {
          it->buffer->abortWaitRecv();  // the buffer lives while armed: Disarm takes mu_
          it = armed_.erase(it);
        } else {
          next = std::min(next, it->deadline);
          ++it;
        }
      }
      wake_ = next;
      cv_.wait_until(lock, next);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Armed> armed_;
  SteadyClock::time_point wake_ = SteadyClock::time_point::max();
  std::thread thread_;  // last: starts after the members it uses
};

// Receives posted and not yet seen to complete, so that destroying the communicator can fail
// them and wake their waiters.
class LiveRecvs {
 public:
  void Add(const std::shared_ptr<P2pOp>& op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.emplace(op.get(), op);
  }
  void Remove(P2pOp* op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.erase(op);
  }
  void CancelAll(Graveyard& graveyard) {
    std::unordered_map<P2pOp*, std::shared_ptr<P2pOp>> ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ops.swap(ops_);
    }
    for (auto& [raw, op] : ops) {
      op->done->Finish(absl::CancelledError(
          absl::StrCat(op->Describe(), ": communicator destroyed before it completed")));
      op->buffer->abortWaitRecv();
      graveyard.Bury(std::move(op));
    }
  }

 private:
  std::mutex mu_;
  std::unordered_map<P2pOp*, std::shared_ptr<P2pOp>> ops_;
};

// What the communicator shares with its receive handles, which may outlive it.
struct RecvShared {
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<Poster> poster;  // set by the communicator; stopped before it goes
  Graveyard graveyard;
  LiveRecvs live;
  WaitWatchdog watchdog;
};

// A receive's handle. No thread of ours sits between Gloo and the receiver: the thread that
// waits calls the buffer's waitRecv itself, so Gloo's device loop wakes it directly when the
// bytes are in (one thread hand-off instead of two through a waiter thread, worth 0.1 to 0.5 ms
// per hop on a loaded machine). Its completion is seen by a Wait: Test() reports what a Wait saw,
// and times().end is when the first Wait saw it.
class RecvHandle final : public CommHandle {
 public:
  RecvHandle(std::shared_ptr<P2pOp> op, std::shared_ptr<RecvShared> shared)
      : op_(std::move(op)), shared_(std::move(shared)) {}

  absl::Status Wait(absl::Duration timeout) override {
    const auto deadline = timeout == absl::InfiniteDuration()
                              ? SteadyClock::time_point::max()
                              : SteadyClock::now() + absl::ToChronoNanoseconds(timeout);
    for (;;) {
      if (op_->done->Test()) return op_->done->Wait(absl::ZeroDuration());
      std::unique_lock<std::mutex> lock(op_->mu);
      if (op_->waiting) {  // another thread is waiting on the buffer; it finishes the op
        lock.unlock();
        const auto slice = std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(5));
        op_->done->Wait(Until(slice)).IgnoreError();
        if (!op_->done->Test() && SteadyClock::now() >= deadline) return Pending();
        continue;
      }
      if (op_->done->Test()) continue;
      const auto now = SteadyClock::now();
      if (now >= deadline) return Pending();  // Wait(0) never blocks
      if (!op_->first_wait) op_->first_wait = now;
      const auto progress_deadline = *op_->first_wait + shared_->timeout;
      op_->waiting = true;
      lock.unlock();
      shared_->poster->Drain();  // about to block: post what waits in the queue (ours too)
      WaitOnBuffer(deadline, progress_deadline);
      lock.lock();
      op_->waiting = false;
    }
  }

  bool Test() override { return op_->done->Test(); }
  CommTimes times() const override { return op_->done->times(); }

 private:
  static absl::Status Pending() {
    return absl::DeadlineExceededError("communication: operation still pending after the wait");
  }

  static absl::Duration Until(SteadyClock::time_point t) {
    if (t == SteadyClock::time_point::max()) return absl::InfiniteDuration();
    const auto left = t - SteadyClock::now();
    if (left <= SteadyClock::duration::zero()) return absl::ZeroDuration();
    return absl::FromChrono(std::chrono::duration_cast<std::chrono::nanoseconds>(left));
  }

  // One waitRecv, bounded by the progress deadline (Gloo's own timeout: an error) and by the
  // caller's (the watchdog aborts it). Finishes the op when the receive is over.
  void WaitOnBuffer(SteadyClock::time_point deadline, SteadyClock::time_point progress_deadline) {
    const bool bounded = deadline < progress_deadline;
    if (bounded && !shared_->watchdog.Arm(op_->buffer.get(), deadline)) {
      op_->done->Finish(absl::CancelledError(
          absl::StrCat(op_->Describe(), ": communicator destroyed before it completed")));
      return;
    }
    absl::Status status;
    bool over = true;
    try {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(progress_deadline - SteadyClock::now());
      // False: aborted, by the watchdog at the caller's deadline or by a cancel; the caller's
      // loop tells which.
      over = op_->buffer->waitRecv(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception& e) {
      status = FromGloo(e, op_->Describe());
    }
    if (bounded) shared_->watchdog.Disarm(op_->buffer.get());
    if (!over) return;
    const bool ok = status.ok();
    op_->done->Finish(std::move(status));
    shared_->live.Remove(op_.get());
    if (!ok) shared_->graveyard.Bury(op_);
  }

  std::shared_ptr<P2pOp> op_;
  std::shared_ptr<RecvShared> shared_;
};

// A send's handle: completed by its peer's waiter thread. A caller about to block on it first
// posts what is queued (the send itself, maybe), as a receive's waiter does.
class SendHandle final : public CommHandle {
 public:
  SendHandle(std::shared_ptr<Completion> done, std::shared_ptr<RecvShared> shared)
      : done_(std::move(done)), shared_(std::move(shared)) {}

  absl::Status Wait(absl::Duration timeout) override {
    if (timeout > absl::ZeroDuration() && !done_->Test()) shared_->poster->Drain();
    return done_->Wait(timeout);
  }
  bool Test() override { return done_->Test(); }
  CommTimes times() const override { return done_->times(); }

 private:
  std::shared_ptr<Completion> done_;
  std::shared_ptr<RecvShared> shared_;
};

struct ReduceOp {
  torch::Tensor buffer;
  std::shared_ptr<Completion> done;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const CommunicatorOptions& options, KeyValueStore& store,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::Context> pipeline, std::shared_ptr<gloo::Context> data,
                   std::unique_ptr<internal::TcpP2p> tcp, std::unique_ptr<internal::TcpP2p> dp_tcp)
      : options_(options),
        store_(store),
        timeout_(ToMillis(options.timeout)),
        device_(std::move(device)),
        pipeline_(std::move(pipeline)),
        data_(std::move(data)),
        tcp_(std::move(tcp)),
        dp_tcp_(std::move(dp_tcp)) {
    // Gloo's point-to-point path: its poster and watchdog threads.
    if (options.transport == CommunicatorOptions::Transport::kGloo) {
      recv_ = std::make_shared<RecvShared>();
      recv_->timeout = timeout_;
      recv_->poster = std::make_unique<Poster>(
          [this](std::shared_ptr<P2pOp> op) { Post(std::move(op)); },
          [this](std::shared_ptr<P2pOp> op) { CancelUnposted(std::move(op)); });
    }
    if (options.data_size > 1) reduce_thread_ = std::thread([this] { RunReduces(); });
  }

  ~GlooCommunicator() override {
    // An all-reduce on our streams is cancelled rather than waited for (its peers see the streams
    // close); one on Gloo's runs to its end or its timeout.
    if (dp_tcp_ != nullptr) dp_tcp_->Shutdown();
    {
      std::lock_guard<std::mutex> lock(reduce_mu_);
      reduce_stop_ = true;
      reduce_cv_.notify_one();
    }
    if (reduce_thread_.joinable()) reduce_thread_.join();
    tcp_.reset();
    if (recv_ != nullptr) {
      recv_->poster->Stop();  // first: it posts through this communicator
      {
        std::lock_guard<std::mutex> lock(waiters_mu_);
        for (auto& [key, waiter] : waiters_) waiter->Stop();
        waiters_.clear();
      }
      recv_->live.CancelAll(recv_->graveyard);
      recv_->watchdog.Stop();
    }
    pipeline_.reset();
    data_.reset();
    if (recv_ != nullptr) recv_->graveyard.Clear();
    device_.reset();
  }

  int pipeline_rank() const override { return options_.pipeline_rank; }
  int pipeline_size() const override { return options_.pipeline_size; }
  int data_rank() const override { return options_.data_rank; }
  int data_size() const override { return options_.data_size; }
  torch::Device device() const override { return torch::kCPU; }

  void Flush() override {
    if (recv_ != nullptr) recv_->poster->Flush();
  }

  std::unique_ptr<CommHandle> Send(const torch::Tensor& tensor, int peer, int tag) override {
    if (absl::Status s = CheckP2p(tensor, peer, tag, "send"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    // contiguous() returns `tensor` itself when it already is, so no copy in the common case.
    if (tcp_ != nullptr) return tcp_->Send(tensor.contiguous(), peer, tag);
    return PostP2p(/*is_send=*/true, tensor.contiguous(), peer, tag);
  }

  std::unique_ptr<CommHandle> Recv(torch::Tensor into, int peer, int tag) override {
    if (absl::Status s = CheckP2p(into, peer, tag, "recv"); !s.ok()) {
      return internal::FinishedHandle(s);
    }
    if (!into.is_contiguous()) {
      return internal::FinishedHandle(
          absl::InvalidArgumentError("recv: the destination tensor must be contiguous"));
    }
    if (tcp_ != nullptr) return tcp_->Recv(std::move(into), peer, tag);
    return PostP2p(/*is_send=*/false, std::move(into), peer, tag);
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
      std::lock_guard<std::mutex> lock(reduce_mu_);
      if (reduce_stop_) {
        done->Finish(absl::CancelledError("all-reduce: communicator is shutting down"));
      } else {
        reduce_queue_.push_back({std::move(buffer), done});
        reduce_cv_.notify_one();
      }
    }
    return internal::MakeHandle(done);
  }

  absl::Status Barrier() override {
    if (options_.transport == CommunicatorOptions::Transport::kTcp) return StoreBarrier();
    // Gloo's: the pipeline group, then the DP group. A rank leaves the second once its DP peers
    // have left their pipeline groups, so every rank of the job has entered.
    for (const auto& [context, name] :
         {std::pair{pipeline_, "pipeline"}, std::pair{data_, "data-parallel"}}) {
      if (context == nullptr) continue;
      try {
        gloo::BarrierOptions opts(context);
        opts.setTimeout(timeout_);
        gloo::barrier(opts);
      } catch (const std::exception& e) {
        return FromGloo(e, absl::StrCat("barrier (", name, " group)"));
      }
    }
    return absl::OkStatus();
  }

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

  std::unique_ptr<CommHandle> PostP2p(bool is_send, torch::Tensor tensor, int peer, int tag) {
    auto op = std::make_shared<P2pOp>();
    op->is_send = is_send;
    op->peer = peer;
    op->tag = tag;
    op->tensor = std::move(tensor);
    std::unique_ptr<CommHandle> handle =
        is_send ? std::unique_ptr<CommHandle>(std::make_unique<SendHandle>(op->done, recv_))
                : std::make_unique<RecvHandle>(op, recv_);
    op->done->MarkStarted();
    const size_t nbytes = op->tensor.nbytes();
    if (nbytes == 0) {  // nothing on the wire; both sides agree since sizes must match
      op->done->Finish(absl::OkStatus());
      return handle;
    }
    try {
      op->buffer = pipeline_->createUnboundBuffer(op->tensor.data_ptr(), nbytes);
    } catch (const std::exception& e) {
      op->done->Finish(FromGloo(e, op->Describe()));
      recv_->graveyard.Bury(std::move(op));
      return handle;
    }
    // A receive's handle may wait on the buffer before the poster has posted it: the wait ends
    // when the bytes are in, however late the post.
    if (!is_send) recv_->live.Add(op);
    if (!recv_->poster->Push(op)) CancelUnposted(std::move(op));
    return handle;
  }

  // On the poster's thread, or on a caller's that drains the queue before blocking.
  void Post(std::shared_ptr<P2pOp> op) {
    try {
      const uint64_t slot = kP2pSlotBase | static_cast<uint64_t>(op->tag);
      if (op->is_send) {
        op->buffer->send(op->peer, slot);
      } else {
        op->buffer->recv(op->peer, slot);
      }
    } catch (const std::exception& e) {
      FailUnposted(std::move(op), FromGloo(e, op->Describe()));
      return;
    }
    if (op->is_send) Waiter(op->peer, /*is_send=*/true).Push(std::move(op));
  }

  void CancelUnposted(std::shared_ptr<P2pOp> op) {
    absl::Status status = absl::CancelledError(
        absl::StrCat(op->Describe(), ": communicator destroyed before it was posted"));
    FailUnposted(std::move(op), std::move(status));
  }

  // Ends an op Gloo never took: its handle fails, a thread already waiting on a receive wakes.
  void FailUnposted(std::shared_ptr<P2pOp> op, absl::Status status) {
    op->done->Finish(std::move(status));
    if (!op->is_send) {
      recv_->live.Remove(op.get());
      op->buffer->abortWaitRecv();
    }
    recv_->graveyard.Bury(std::move(op));
  }

  PeerWaiter& Waiter(int peer, bool is_send) {
    std::lock_guard<std::mutex> lock(waiters_mu_);
    auto& slot = waiters_[{peer, is_send}];
    if (slot == nullptr) slot = std::make_unique<PeerWaiter>(timeout_, recv_->graveyard);
    return *slot;
  }

  void RunReduces() {
    NameThisThread("zp-reduce");
    uint32_t tag = 0;
    for (;;) {
      ReduceOp op;
      {
        std::unique_lock<std::mutex> lock(reduce_mu_);
        reduce_cv_.wait(lock, [&] { return reduce_stop_ || !reduce_queue_.empty(); });
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
      absl::Status status;
      if (dp_tcp_ != nullptr) {
        status = internal::AllReduceAverage(*dp_tcp_, op.buffer, tag++, reduce_scratch_,
                                            options_.timeout);
        if (!status.ok()) {
          status = absl::Status(status.code(),
                                absl::StrCat("all-reduce of ", op.buffer.numel(),
                                             " floats in the data-parallel group of pipeline rank ",
                                             options_.pipeline_rank, ": ", status.message()));
        }
        op.done->Finish(std::move(status));
        continue;
      }
      try {
        gloo::AllreduceOptions opts(data_);
        opts.setOutput<float>(op.buffer.data_ptr<float>(), op.buffer.numel());
        void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
        opts.setReduceFunction(sum);
        opts.setTag(tag++);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        op.buffer.div_(options_.data_size);
      } catch (const std::exception& e) {
        status = FromGloo(e, absl::StrCat("all-reduce of ", op.buffer.numel(),
                                          " floats in the data-parallel group of pipeline rank ",
                                          options_.pipeline_rank));
      }
      op.done->Finish(std::move(status));
    }
  }

  const CommunicatorOptions options_;
  KeyValueStore& store_;  // barriers on the streams
  int barriers_ = 0;      // barriers so far (every rank calls them in the same order)
  const std::chrono::milliseconds timeout_;
  // Gloo's transport (options.transport == kGloo only; null on the streams).
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> pipeline_;  // null when p = 1
  std::shared_ptr<gloo::Context> data_;      // null when d = 1
  // Point-to-point on ZeroPipe's own streams (options.transport == kTcp, p > 1); else Gloo's
  // buffers.
  std::unique_ptr<internal::TcpP2p> tcp_;
  // All-reduces on ZeroPipe's own streams (options.transport == kTcp, d > 1); else Gloo's
  // allreduce.
  std::unique_ptr<internal::TcpP2p> dp_tcp_;
  torch::Tensor reduce_scratch_;  // the reduce thread's
  // Gloo's point-to-point path only (null on the TCP streams): receives' handles wait on Gloo
  // themselves (RecvHandle); the poster, cancellation and the graveyard.
  std::shared_ptr<RecvShared> recv_;

  std::mutex waiters_mu_;  // sends: completed by one waiter thread per peer
  std::map<std::pair<int, bool>, std::unique_ptr<PeerWaiter>> waiters_;

  std::mutex reduce_mu_;
  std::condition_variable reduce_cv_;
  bool reduce_stop_ = false;
  std::deque<ReduceOp> reduce_queue_;
  std::thread reduce_thread_;
};

absl::StatusOr<std::shared_ptr<gloo::Context>> Connect(
    KeyValueStore& store, const std::string& prefix, absl::string_view group, int rank, int size,
    absl::Duration timeout, std::shared_ptr<gloo::transport::Device>& device) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(ToMillis(timeout));
  auto gloo_store = NewGlooStore(store, prefix, timeout);
  try {
    context->connectFullMesh(*gloo_store, device);
  } catch (const GlooStoreTimeout& e) {
    return absl::DeadlineExceededError(absl::StrCat(
        "gloo: the ", group, " group (rank ", rank, " of ", size, ") did not assemble within ",
        absl::FormatDuration(timeout), ": ", e.what(), "; is every rank of the job running?"));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo: connecting the ", group, " group (rank ",
                                               rank, " of ", size, ") failed: ", e.what()));
  }
  return std::shared_ptr<gloo::Context>(std::move(context));
}

// A group's TCP streams (`rank` of `size`, rendezvous keys under `prefix`) when the transport is
// kTcp; null for a single rank or the Gloo transport, which then marks its key and checks that
// every other rank did the same (internal::PublishGlooMarker).
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
  if (o.transport == CommunicatorOptions::Transport::kGloo) {
    if (absl::Status s = internal::PublishGlooMarker(to, store); !s.ok()) return s;
    return nullptr;
  }
  return internal::TcpP2p::Connect(to, store);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(
    const CommunicatorOptions& options, KeyValueStore& store) {
  const CommunicatorOptions& o = options;
  if (o.pipeline_size < 1 || o.data_size < 1 || o.pipeline_rank < 0 ||
      o.pipeline_rank >= o.pipeline_size || o.data_rank < 0 || o.data_rank >= o.data_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank (", o.pipeline_rank, ", ", o.data_rank,
                     ") does not fit p = ", o.pipeline_size, ", d = ", o.data_size));
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("gloo: the timeout must be positive");
  }
  // Both groups' streams (or, on Gloo's path, the marker check that stands for them) come first:
  // a rank of a job whose workers run different transports learns it there, not by timing out
  // in Gloo's rendezvous. Every rank does its pipeline group before its DP group, so a rank
  // waiting in its DP group only waits for ranks that are done with (or can finish) their own
  // pipeline group, and the phases cannot deadlock.
  auto tcp = ConnectStreams(o, store, "pipeline", o.pipeline_rank, o.pipeline_size,
                            absl::StrCat(o.key_prefix, "p2p/", o.data_rank, "/"));
  if (!tcp.ok()) return tcp.status();
  auto dp_tcp = ConnectStreams(o, store, "data-parallel", o.data_rank, o.data_size,
                               absl::StrCat(o.key_prefix, "dp-tcp/", o.pipeline_rank, "/"));
  if (!dp_tcp.ok()) return dp_tcp.status();
  // On the streams that is all: sends, receives and all-reduces go over them, barriers through
  // the store.
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> pipeline, data;
  if (o.transport == CommunicatorOptions::Transport::kGloo) {
    try {
      gloo::transport::tcp::attr attr;
      if (!o.iface.empty()) {
        attr.iface = o.iface;
      } else {
        attr.hostname = o.hostname;
      }
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("gloo: cannot open a TCP device on '",
                                                 o.iface.empty() ? o.hostname : o.iface,
                                                 "': ", e.what()));
    }
    if (o.pipeline_size > 1) {
      auto c = Connect(store, absl::StrCat(o.key_prefix, "pp/", o.data_rank, "/"), "pipeline",
                       o.pipeline_rank, o.pipeline_size, o.timeout, device);
      if (!c.ok()) return c.status();
      pipeline = *std::move(c);
    }
    if (o.data_size > 1) {
      auto c = Connect(store, absl::StrCat(o.key_prefix, "dp/", o.pipeline_rank, "/"),
                       "data-parallel", o.data_rank, o.data_size, o.timeout, device);
      if (!c.ok()) return c.status();
      data = *std::move(c);
    }
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(options, store, std::move(device),
                                                            std::move(pipeline), std::move(data),
                                                            *std::move(tcp), *std::move(dp_tcp)));
}

}  // namespace zpipe::worker
