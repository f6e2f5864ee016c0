#include "worker/comm/tcp_p2p.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/completion.h"
#include "worker/comm/peer_error.h"

namespace zpipe::worker::internal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x5a504831;    // "ZPH1": the first bytes on a new stream
constexpr uint32_t kMessageMagic = 0x5a504d31;  // "ZPM1": every message's header
// Sends of up to this many bytes are written on the caller's thread at once (a loopback write of
// this size is a few tens of microseconds); larger ones go to the pump, so a multi-megabyte
// activation never holds up the caller's next action while the kernel copies it.
constexpr size_t kInlineSendBytes = size_t{1} << 20;
// A thread waiting beside another on the same receive re-checks at least this often (the other
// may read its bytes and leave it polling a quiet socket).
constexpr auto kSharedWaitSlice = std::chrono::milliseconds(1);
// A thread waiting for a send keeps reading incoming bytes at least this often.
constexpr auto kSendWaitSlice = std::chrono::milliseconds(1);

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  uint32_t group;  // FNV-1a of the key prefix: both ends belong to the same job attempt and group
};

struct Header {
  uint32_t magic;
  uint32_t tag;
  uint64_t nbytes;
};
static_assert(sizeof(Header) == 16);

uint32_t Fnv1a(absl::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// `what` and the system's words for `err` (errno, read right after the failing call).
std::string Errno(absl::string_view what, int err) {
  return absl::StrCat(what, ": ", std::strerror(err));
}

struct Op {
  bool is_send = false;
  int peer = 0;
  int tag = 0;
  absl::string_view group;  // "pipeline" or "data-parallel", for messages (the State's string)
  torch::Tensor tensor;     // keeps `data` alive until the op completes
  char* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  // Receives: when a thread first waited for it (the no-progress limit runs from there), and how
  // many threads wait for it now. `first_wait` is guarded by the pair's Conn::recv_mu (an Op
  // belongs to one pair; the annotation cannot name another object's lock).
  std::optional<Clock::time_point> first_wait;
  std::atomic<int> waiters{0};

  std::string Describe() const {
    return absl::StrCat(is_send ? "send to " : "recv from ", group, " rank ", peer, " (tag ", tag,
                        ", ", nbytes, " bytes)");
  }
};

// `op`'s stream to `peer` failed with `err` (errno of the failing call).
absl::Status Broken(const Op& op, int peer, int err) {
  return MarkPeerLost(absl::UnavailableError(
      Errno(absl::StrCat(op.Describe(), ": the connection to ", op.group, " rank ", peer,
                         " failed (process gone?)"),
            err)));
}

// One stream to one peer. Each direction has its own lock and queue; the two are never held
// together. `peer` and `fd` are fixed once made; the fd is closed by the State.
struct Conn {
  Conn(int peer, int fd, Clock::time_point now)
      : peer(peer), fd(fd), send_progress(now), recv_progress(now) {}

  const int peer;
  const int fd;

  absl::Mutex send_mu;
  // In posting order; the head may be partly written.
  std::deque<std::shared_ptr<Op>> sends ABSL_GUARDED_BY(send_mu);
  size_t sent ABSL_GUARDED_BY(send_mu) = 0;  // bytes of the head's header and payload written
  Header send_header ABSL_GUARDED_BY(send_mu){};
  // Once set, every send on this pair fails with it.
  absl::Status send_failed ABSL_GUARDED_BY(send_mu);
  Clock::time_point send_progress ABSL_GUARDED_BY(send_mu);  // last byte written
  std::atomic<bool> pump_wanted{false};  // sends are left that the socket did not take

  absl::Mutex recv_mu;
  // Posted, in order; the head may be partly read.
  std::deque<std::shared_ptr<Op>> recvs ABSL_GUARDED_BY(recv_mu);
  size_t received ABSL_GUARDED_BY(recv_mu) = 0;  // bytes of the head's header and payload read
  Header recv_header ABSL_GUARDED_BY(recv_mu){};
  absl::Status recv_failed ABSL_GUARDED_BY(recv_mu);
  Clock::time_point recv_progress ABSL_GUARDED_BY(recv_mu);  // last byte read
  std::atomic<int> posted{0};  // recvs.size(), readable without the lock

  // Writes what the socket takes now. An error means the stream is broken.
  absl::Status WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu) {
    while (!sends.empty()) {
      Op& op = *sends.front();
      if (sent == 0) send_header = {kMessageMagic, static_cast<uint32_t>(op.tag), op.nbytes};
      iovec iov[2];
      int n = 0;
      if (sent < sizeof(Header)) {
        iov[n++] = {reinterpret_cast<char*>(&send_header) + sent, sizeof(Header) - sent};
        iov[n++] = {op.data, op.nbytes};
      } else {
        const size_t off = sent - sizeof(Header);
        iov[n++] = {op.data + off, op.nbytes - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      const ssize_t k = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return absl::OkStatus();
        return Broken(op, peer, err);
      }
      sent += static_cast<size_t>(k);
      send_progress = Clock::now();
      if (sent == sizeof(Header) + op.nbytes) {
        op.done->Finish(absl::OkStatus());
        sends.pop_front();
        sent = 0;
      }
    }
    return absl::OkStatus();
  }

  // Reads what the socket has for the posted receives, straight into their tensors. An error
  // means the stream is broken.
  absl::Status ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(recv_mu) {
    while (!recvs.empty()) {
      Op& op = *recvs.front();
      iovec iov[2];
      int n = 0;
      const bool had_header = received >= sizeof(Header);
      if (!had_header) {
        iov[n++] = {reinterpret_cast<char*>(&recv_header) + received, sizeof(Header) - received};
        iov[n++] = {op.data, op.nbytes};
      } else {
        const size_t off = received - sizeof(Header);
        iov[n++] = {op.data + off, op.nbytes - off};
      }
      const ssize_t k = ::readv(fd, iov, n);
      if (k < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return absl::OkStatus();
        return Broken(op, peer, err);
      }
      if (k == 0) {
        return MarkPeerLost(absl::UnavailableError(absl::StrCat(
            op.Describe(), ": ", op.group, " rank ", peer, " closed its connection (process gone?)")));
      }
      received += static_cast<size_t>(k);
      recv_progress = Clock::now();
      if (!had_header && received >= sizeof(Header)) {
        const Header& h = recv_header;
        if (h.magic != kMessageMagic) {
          return absl::DataLossError(absl::StrCat(op.Describe(), ": the stream from ", op.group,
                                                  " rank ", peer, " is corrupt"));
        }
        if (h.tag != static_cast<uint32_t>(op.tag) || h.nbytes != op.nbytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              op.Describe(), ": ", op.group, " rank ", peer, " sent tag ", h.tag, " with ",
              h.nbytes,
              " bytes; sends and receives between two ranks must be posted in the same order "
              "with the same sizes"));
        }
      }
      if (received == sizeof(Header) + op.nbytes) {
        op.done->Finish(absl::OkStatus());
        recvs.pop_front();
        posted.store(static_cast<int>(recvs.size()));
        received = 0;
      }
    }
    return absl::OkStatus();
  }
};

// Writes the sends the socket did not take at once, as their peers read.
class Pump {
 public:
  using FailFn = std::function<void(Conn&, absl::Status)>;
  // `fail` ends a broken pair (called without any of the pair's locks held).
  Pump(std::vector<Conn*> conns, FailFn fail) : conns_(std::move(conns)), fail_(std::move(fail)) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { Run(); });
  }
  ~Pump() {
    Stop();
    ::close(wake_fd_);
  }

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t k = ::write(wake_fd_, &one, sizeof(one));
  }

  void Stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    Wake();
    thread_.join();
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "zp-p2p-pump");
    std::vector<pollfd> fds;
    std::vector<Conn*> polled;
    while (!stop_.load()) {
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      polled.clear();
      for (Conn* c : conns_) {
        if (!c->pump_wanted.load()) continue;
        fds.push_back({c->fd, POLLOUT, 0});
        polled.push_back(c);
      }
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) {
        uint64_t n;
        [[maybe_unused]] ssize_t k = ::read(wake_fd_, &n, sizeof(n));
      }
      for (size_t i = 0; i < polled.size(); ++i) {
        if (fds[i + 1].revents == 0) continue;
        Conn& c = *polled[i];
        absl::Status st;
        {
          absl::MutexLock lock(&c.send_mu);
          st = c.WriteLocked();
          if (c.sends.empty()) c.pump_wanted = false;
        }
        if (!st.ok()) fail_(c, std::move(st));
      }
    }
  }

  const std::vector<Conn*> conns_;
  const FailFn fail_;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

struct TcpP2p::State {
  std::string group;
  int rank = 0;
  Clock::duration timeout{};
  std::vector<std::unique_ptr<Conn>> conns;  // by peer rank; null for this rank
  std::unique_ptr<Pump> pump;

  ~State() {
    for (auto& c : conns) {
      if (c != nullptr && c->fd >= 0) ::close(c->fd);
    }
  }

  // Fails every queued op of the pair and every later one with `status`, and shuts the stream so
  // the peer learns of it and every thread polling it wakes.
  void Fail(Conn& c, absl::Status status) {
    std::deque<std::shared_ptr<Op>> ops;
    {
      absl::MutexLock lock(&c.send_mu);
      if (c.send_failed.ok()) c.send_failed = status;
      ops.swap(c.sends);
      c.sent = 0;
      c.pump_wanted = false;
    }
    for (auto& op : ops) op->done->Finish(status);
    ops.clear();
    {
      absl::MutexLock lock(&c.recv_mu);
      if (c.recv_failed.ok()) c.recv_failed = status;
      ops.swap(c.recvs);
      c.posted = 0;
      c.received = 0;
    }
    for (auto& op : ops) op->done->Finish(status);
    ::shutdown(c.fd, SHUT_RDWR);
  }

  // Reads what has arrived on every pair with a receive posted. Never blocks for bytes.
  void ReadAll() {
    for (auto& c : conns) {
      if (c == nullptr || c->posted.load() == 0) continue;
      absl::Status st;
      {
        absl::MutexLock lock(&c->recv_mu);
        st = c->ReadLocked();
      }
      if (!st.ok()) Fail(*c, std::move(st));
    }
  }

  // Blocks until a pair with a receive posted (always `mine`) has bytes or breaks, or `until`.
  void PollReads(const Conn& mine, Clock::time_point until) {
    std::vector<pollfd> fds;
    fds.push_back({mine.fd, POLLIN, 0});
    for (auto& c : conns) {
      if (c == nullptr || c.get() == &mine || c->posted.load() == 0) continue;
      fds.push_back({c->fd, POLLIN, 0});
    }
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return;
    // Rounded up, so a wait never returns before its deadline only to spin.
    const int ms = static_cast<int>(
        std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), 60'000));
    ::poll(fds.data(), fds.size(), ms);
  }
};

namespace {

class P2pHandle final : public CommHandle {
 public:
  P2pHandle(std::shared_ptr<Op> op, std::shared_ptr<TcpP2p::State> state)
      : op_(std::move(op)), state_(std::move(state)) {}

  absl::Status Wait(absl::Duration timeout) override {
    const auto deadline = timeout == absl::InfiniteDuration()
                              ? Clock::time_point::max()
                              : Clock::now() + absl::ToChronoNanoseconds(timeout);
    return op_->is_send ? WaitSend(deadline) : WaitRecv(deadline);
  }

  bool Test() override {
    if (op_->done->Test()) return true;
    if (!op_->is_send) state_->ReadAll();
    return op_->done->Test();
  }

  CommTimes times() const override { return op_->done->times(); }

 private:
  static absl::Status Pending() {
    return absl::DeadlineExceededError("communication: operation still pending after the wait");
  }

  Conn& conn() const { return *state_->conns[op_->peer]; }

  absl::Status WaitRecv(Clock::time_point deadline) {
    ++op_->waiters;
    struct Leave {
      Op& op;
      ~Leave() { --op.waiters; }
    } leave{*op_};
    for (;;) {
      state_->ReadAll();
      if (op_->done->Test()) return op_->done->Wait(absl::ZeroDuration());
      const auto now = Clock::now();
      if (now >= deadline) return Pending();
      // The no-progress limit: from the first wait, or the pair's last byte if later.
      Clock::time_point limit;
      {
        absl::MutexLock lock(&conn().recv_mu);
        if (!op_->first_wait) op_->first_wait = now;
        limit = std::max(*op_->first_wait, conn().recv_progress) + state_->timeout;
      }
      if (now >= limit) {
        state_->Fail(conn(), MarkPeerLost(absl::DeadlineExceededError(absl::StrCat(
                                 op_->Describe(), ": no bytes within the communicator timeout (",
                                 absl::FormatDuration(absl::FromChrono(state_->timeout)),
                                 "); is the peer alive?"))));
        continue;
      }
      auto until = std::min(deadline, limit);
      if (op_->waiters.load() > 1) until = std::min(until, now + kSharedWaitSlice);
      state_->PollReads(conn(), until);
    }
  }

  absl::Status WaitSend(Clock::time_point deadline) {
    for (;;) {
      if (op_->done->Test()) return op_->done->Wait(absl::ZeroDuration());
      const auto now = Clock::now();
      if (now >= deadline) return Pending();
      Clock::time_point limit;
      {
        absl::MutexLock lock(&conn().send_mu);
        limit = conn().send_progress + state_->timeout;
      }
      if (now >= limit) {
        state_->Fail(conn(), MarkPeerLost(absl::DeadlineExceededError(absl::StrCat(
                                 op_->Describe(),
                                 ": the peer read nothing within the "
                                 "communicator timeout (",
                                 absl::FormatDuration(absl::FromChrono(state_->timeout)),
                                 "); is it alive?"))));
        continue;
      }
      // Keep reading what arrives meanwhile: the peer may be blocked writing to us before it
      // reads what we send.
      state_->ReadAll();
      const auto slice = std::min({deadline, limit, now + kSendWaitSlice});
      op_->done->Wait(absl::FromChrono(slice - now)).IgnoreError();
    }
  }

  std::shared_ptr<Op> op_;
  std::shared_ptr<TcpP2p::State> state_;
};

// The address to listen on: the interface's first IPv4 (else IPv6) address, or `hostname`
// resolved.
absl::StatusOr<sockaddr_storage> ListenAddress(const TcpP2pOptions& o, socklen_t* len) {
  sockaddr_storage out{};
  if (!o.iface.empty()) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return absl::UnavailableError(Errno("getifaddrs", errno));
    const ifaddrs* found = nullptr;
    for (int family : {AF_INET, AF_INET6}) {
      for (const ifaddrs* a = list; a != nullptr && found == nullptr; a = a->ifa_next) {
        if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == family && o.iface == a->ifa_name) {
          found = a;
        }
      }
    }
    if (found == nullptr) {
      ::freeifaddrs(list);
      return absl::UnavailableError(
          absl::StrCat(o.group, " streams: network interface '", o.iface, "' has no IP address"));
    }
    *len = found->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&out, found->ifa_addr, *len);
    ::freeifaddrs(list);
    return out;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(o.hostname.c_str(), nullptr, &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(o.group, " streams: cannot resolve '", o.hostname, "': ", ::gai_strerror(rc)));
  }
  *len = res->ai_addrlen;
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  return out;
}

// Numeric host and port of a bound socket.
std::string Describe(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    port = ntohs(in.sin_port);
  } else {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    port = ntohs(in6.sin6_port);
  }
  return absl::StrCat(host, " ", port);
}

// Waits until `fd` is ready for `events` or `deadline`; false on the deadline.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 60'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Writes (`out`) or reads `n` bytes on a fresh stream, a fixed-size record, bounded by `deadline`.
bool ExchangeExactly(int fd, bool out, char* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t k =
        out ? ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!PollUntil(fd, out ? POLLOUT : POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

void Tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// The job's workers run different transports: rank `gloo` of the group on Gloo, rank `tcp` on
// the streams (seen by rank o.rank).
absl::Status MixedTransports(const TcpP2pOptions& o, int tcp, int gloo) {
  return absl::FailedPreconditionError(absl::StrCat(
      o.group, " group: rank ", gloo,
      " runs on Gloo (zpipe-worker --transport gloo, a release before LibTorch came from the "
      "PyTorch wheel) and rank ",
      tcp, " on ZeroPipe's streams (--transport tcp); run every worker of a job from the same "
      "release, with --transport tcp"));
}

// Closes the fds it holds unless released.
struct FdSet {
  std::vector<int> fds;
  ~FdSet() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// A stream to `a`, tried again every 10 ms (the peer may not listen yet) until `deadline`; -1
// when it passes first.
int DialUntil(const addrinfo& a, Clock::time_point deadline) {
  for (;;) {
    const int fd = ::socket(a.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, a.ai_addr, a.ai_addrlen) == 0) return fd;
    if (fd >= 0) ::close(fd);
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// One rank's part in setting up the group's streams, one per pair, all within o.timeout: it
// listens and publishes its address, connects to the lower ranks and accepts the higher ones.
// Every fd it opened is closed with it unless taken out of peer_fds(). `o` (size >= 2, rank in
// range) and `store` outlive it.
class Rendezvous {
 public:
  Rendezvous(const TcpP2pOptions& o, KeyValueStore& store)
      : o_(o),
        store_(store),
        deadline_(Clock::now() + absl::ToChronoNanoseconds(o.timeout)),
        group_(Fnv1a(o.key_prefix)) {}

  // Binds a port of the kernel's choosing on ListenAddress and publishes "host port" under this
  // rank's key.
  absl::Status Listen();
  // Connects to every lower rank at the address it published, and introduces this rank.
  absl::Status ConnectLower();
  // Accepts a stream from every higher rank (after Listen).
  absl::Status AcceptHigher();

  // By peer rank: the connected streams, -1 for this rank.
  std::vector<int>& peer_fds() { return peers_.fds; }

 private:
  int listen_fd() const { return listener_.fds[0]; }

  // Names the ranks that did not `how` (ranks not yet connected, or `missing` when given).
  absl::Status TimedOut(absl::string_view how, std::vector<int> missing = {}) const;
  // Connects to lower rank `j`, which published `address`.
  absl::Status ConnectTo(int j, const std::string& address);
  // FAILED_PRECONDITION when a higher rank not yet connected says in the store that it is on Gloo.
  absl::Status CheckHigherNotOnGloo();
  // Takes the next stream from the listener; true when it is a higher rank of this group that was
  // not connected yet.
  bool AcceptOne();

  const TcpP2pOptions& o_;
  KeyValueStore& store_;
  const Clock::time_point deadline_;
  const uint32_t group_;  // in every hello: both ends belong to the same job attempt and group
  FdSet listener_{{-1}};
  FdSet peers_{std::vector<int>(o_.size, -1)};
};

absl::Status Rendezvous::Listen() {
  socklen_t len = 0;
  auto addr = ListenAddress(o_, &len);
  if (!addr.ok()) return addr.status();

  listener_.fds[0] = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int lfd = listen_fd();
  if (lfd < 0) {
    const int err = errno;
    return absl::UnavailableError(Errno(absl::StrCat(o_.group, " streams: socket"), err));
  }
  if (addr->ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(*addr).sin_port = 0;
  } else {
    reinterpret_cast<sockaddr_in6&>(*addr).sin6_port = 0;
  }
  if (::bind(lfd, reinterpret_cast<const sockaddr*>(&*addr), len) != 0 ||
      ::listen(lfd, o_.size) != 0) {
    const int err = errno;
    return absl::UnavailableError(
        Errno(absl::StrCat(o_.group, " streams: listening on ", Describe(*addr)), err));
  }

  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  return store_.Set(absl::StrCat(o_.key_prefix, o_.rank), Describe(bound));
}

absl::Status Rendezvous::TimedOut(absl::string_view how, std::vector<int> missing) const {
  if (missing.empty()) {
    for (int j = 0; j < o_.size; ++j) {
      if (j != o_.rank && peers_.fds[j] < 0) missing.push_back(j);
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      o_.group, " streams: rank ", o_.rank, " of ", o_.size, ": ",
      missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " did not ", how,
      " within ", absl::FormatDuration(o_.timeout), "; is every rank of the job running?"));
}

absl::Status Rendezvous::ConnectLower() {
  std::vector<std::string> keys;
  for (int j = 0; j < o_.rank; ++j) keys.push_back(absl::StrCat(o_.key_prefix, j));
  if (keys.empty()) return absl::OkStatus();
  auto values = store_.Wait(keys, absl::Now() + absl::FromChrono(deadline_ - Clock::now()));
  if (absl::IsDeadlineExceeded(values.status())) {
    return TimedOut("publish an address", UnsetKeys(store_, keys));  // keys[j]: rank j
  }
  if (!values.ok()) return values.status();
  for (int j = 0; j < o_.rank; ++j) {
    if (absl::Status s = ConnectTo(j, (*values)[j]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Rendezvous::ConnectTo(int j, const std::string& address) {
  if (address == kGlooP2pMarker) return MixedTransports(o_, /*tcp=*/o_.rank, /*gloo=*/j);
  std::vector<std::string> parts = absl::StrSplit(address, ' ');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) {
    return absl::InvalidArgumentError(absl::StrCat(o_.group, " streams: rank ", j, " published '",
                                                   address, "', not 'host port'"));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(parts[0].c_str(), parts[1].c_str(), &hints, &res) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o_.group, " streams: rank ", j, " published a bad address '", address, "'"));
  }
  const int fd = DialUntil(*res, deadline_);
  ::freeaddrinfo(res);
  if (fd < 0) return TimedOut("accept a connection");
  peers_.fds[j] = fd;
  Hello hello{kHelloMagic, o_.rank, o_.size, group_};
  if (!ExchangeExactly(fd, /*out=*/true, reinterpret_cast<char*>(&hello), sizeof(hello),
                       deadline_)) {
    return absl::UnavailableError(
        absl::StrCat(o_.group, " streams: introducing rank ", o_.rank, " to rank ", j, " failed"));
  }
  return absl::OkStatus();
}

absl::Status Rendezvous::AcceptHigher() {
  for (int left = o_.size - 1 - o_.rank; left > 0;) {
    // Waits in slices: a higher rank that is on Gloo never connects, but says so in the store.
    const auto slice = std::min(deadline_, Clock::now() + std::chrono::milliseconds(100));
    if (!PollUntil(listen_fd(), POLLIN, slice)) {
      if (absl::Status s = CheckHigherNotOnGloo(); !s.ok()) return s;
      if (Clock::now() >= deadline_) return TimedOut("connect");
      continue;
    }
    if (AcceptOne()) --left;
  }
  return absl::OkStatus();
}

absl::Status Rendezvous::CheckHigherNotOnGloo() {
  for (int j = o_.rank + 1; j < o_.size; ++j) {
    if (peers_.fds[j] >= 0) continue;
    auto v = store_.Get(absl::StrCat(o_.key_prefix, j));
    if (v.ok() && *v == kGlooP2pMarker) return MixedTransports(o_, /*tcp=*/o_.rank, /*gloo=*/j);
  }
  return absl::OkStatus();
}

bool Rendezvous::AcceptOne() {
  const int fd = ::accept4(listen_fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return false;
  // A rank writes its hello as it connects; a client that sends nothing holds us up briefly.
  const auto hello_deadline = std::min(deadline_, Clock::now() + std::chrono::seconds(2));
  Hello hello{};
  if (!ExchangeExactly(fd, /*out=*/false, reinterpret_cast<char*>(&hello), sizeof(hello),
                       hello_deadline) ||
      hello.magic != kHelloMagic || hello.group != group_ || hello.size != o_.size ||
      hello.rank <= o_.rank || hello.rank >= o_.size || peers_.fds[hello.rank] >= 0) {
    ::close(fd);  // not one of ours (a stray client, another job's rank): ignore it
    return false;
  }
  peers_.fds[hello.rank] = fd;
  return true;
}

// The group over `peer_fds` (by peer rank, taken: left -1): a tuned Conn per peer and the pump
// that writes what their sockets do not take at once.
std::shared_ptr<TcpP2p::State> NewState(const TcpP2pOptions& o, std::vector<int>& peer_fds) {
  auto state = std::make_shared<TcpP2p::State>();
  state->group = o.group;
  state->rank = o.rank;
  state->timeout = absl::ToChronoNanoseconds(o.timeout);
  state->conns.resize(o.size);
  std::vector<Conn*> conns;
  const auto now = Clock::now();
  for (int j = 0; j < o.size; ++j) {
    if (j == o.rank) continue;
    auto c = std::make_unique<Conn>(j, std::exchange(peer_fds[j], -1), now);
    Tune(c->fd);
    conns.push_back(c.get());
    state->conns[j] = std::move(c);
  }
  state->pump = std::make_unique<Pump>(
      std::move(conns), [s = state.get()](Conn& c, absl::Status st) { s->Fail(c, std::move(st)); });
  return state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpP2p>> TcpP2p::Connect(const TcpP2pOptions& o,
                                                        KeyValueStore& store) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.group, " streams: rank ", o.rank, " does not fit a group of ", o.size));
  }
  // Lower ranks are connected to, higher ones accepted: one stream per pair.
  Rendezvous rendezvous(o, store);
  if (absl::Status s = rendezvous.Listen(); !s.ok()) return s;
  if (absl::Status s = rendezvous.ConnectLower(); !s.ok()) return s;
  if (absl::Status s = rendezvous.AcceptHigher(); !s.ok()) return s;
  return std::unique_ptr<TcpP2p>(new TcpP2p(NewState(o, rendezvous.peer_fds())));
}

TcpP2p::TcpP2p(std::shared_ptr<State> state) : state_(std::move(state)) {}

TcpP2p::~TcpP2p() { Shutdown(); }

void TcpP2p::Shutdown() {
  // Failed first: a Send racing with this sees the pair failed instead of waking a stopped pump.
  for (auto& c : state_->conns) {
    if (c == nullptr) continue;
    state_->Fail(*c, absl::CancelledError("communicator destroyed before the operation completed"));
  }
  state_->pump->Stop();
}

int TcpP2p::rank() const { return state_->rank; }
int TcpP2p::size() const { return static_cast<int>(state_->conns.size()); }

namespace {

// A send or receive of `tensor`, started now.
std::shared_ptr<Op> NewOp(bool is_send, torch::Tensor tensor, int peer, int tag,
                          absl::string_view group) {
  auto op = std::make_shared<Op>();
  op->group = group;
  op->is_send = is_send;
  op->peer = peer;
  op->tag = tag;
  op->nbytes = tensor.nbytes();
  op->data = static_cast<char*>(tensor.data_ptr());
  op->tensor = std::move(tensor);
  op->done->MarkStarted();
  // Nothing on the wire for an empty tensor; both sides agree since sizes must match.
  if (op->nbytes == 0) op->done->Finish(absl::OkStatus());
  return op;
}

// Ends `op`, posted on a pair that failed earlier with `failed`.
void FailLate(Op& op, const absl::Status& failed) {
  op.done->Finish(
      Reworded(failed, absl::StrCat(op.Describe(), ": the connection failed earlier: ",
                                    failed.message())));
}

}  // namespace

std::unique_ptr<CommHandle> TcpP2p::Send(torch::Tensor tensor, int peer, int tag) {
  auto op = NewOp(/*is_send=*/true, std::move(tensor), peer, tag, state_->group);
  auto handle = std::make_unique<P2pHandle>(op, state_);
  if (op->nbytes == 0) return handle;
  Conn& c = *state_->conns[peer];
  absl::Status st;
  bool wake_pump = false;
  {
    absl::MutexLock lock(&c.send_mu);
    if (!c.send_failed.ok()) {
      FailLate(*op, c.send_failed);
      return handle;
    }
    const bool first = c.sends.empty();
    if (first) c.send_progress = Clock::now();  // the no-progress limit starts with the queue
    c.sends.push_back(op);
    if (first && op->nbytes <= kInlineSendBytes) st = c.WriteLocked();
    if (st.ok() && !c.sends.empty() && !c.pump_wanted.load()) {
      c.pump_wanted = true;
      wake_pump = true;
    }
  }
  if (!st.ok()) state_->Fail(c, std::move(st));
  if (wake_pump) state_->pump->Wake();
  return handle;
}

std::unique_ptr<CommHandle> TcpP2p::Recv(torch::Tensor into, int peer, int tag) {
  auto op = NewOp(/*is_send=*/false, std::move(into), peer, tag, state_->group);
  auto handle = std::make_unique<P2pHandle>(op, state_);
  if (op->nbytes == 0) return handle;
  Conn& c = *state_->conns[peer];
  absl::MutexLock lock(&c.recv_mu);
  if (!c.recv_failed.ok()) {
    FailLate(*op, c.recv_failed);
    return handle;
  }
  c.recvs.push_back(std::move(op));
  c.posted.store(static_cast<int>(c.recvs.size()));
  return handle;
}

absl::Status AllReduceAverage(TcpP2p& group, torch::Tensor buffer, uint32_t seq,
                              torch::Tensor& scratch, absl::Duration timeout) {
  const int d = group.size(), r = group.rank();
  const int64_t n = buffer.numel();
  // Tags: 2 (d - 1) messages per all-reduce and direction, numbered by `seq`.
  const auto tag = [&](int step) {
    return static_cast<int>((static_cast<uint64_t>(seq) * 2 * d + step) % (1u << 24));
  };
  const auto both = [&](std::unique_ptr<CommHandle> a,
                        std::unique_ptr<CommHandle> b) -> absl::Status {
    absl::Status sa = a->Wait(timeout), sb = b->Wait(timeout);
    return sa.ok() ? sb : sa;
  };
  if (n == 0) return absl::OkStatus();
  if (d == 2) {
    if (scratch.numel() < n) scratch = torch::empty({n}, torch::kFloat32);
    torch::Tensor theirs = scratch.narrow(0, 0, n);
    auto recv = group.Recv(theirs, 1 - r, tag(0));
    if (absl::Status s = both(group.Send(buffer, 1 - r, tag(0)), std::move(recv)); !s.ok()) {
      return s;
    }
    buffer.add_(theirs).div_(2);
    return absl::OkStatus();
  }
  const int next = (r + 1) % d, prev = (r + d - 1) % d;
  const auto chunk = [&](int c) {
    c = ((c % d) + d) % d;
    const int64_t base = n / d, extra = n % d;
    const int64_t off = c * base + std::min<int64_t>(c, extra);
    return buffer.narrow(0, off, base + (c < extra ? 1 : 0));
  };
  if (scratch.numel() < n / d + 1) scratch = torch::empty({n / d + 1}, torch::kFloat32);
  // Reduce-scatter: after step s, chunk r - s - 1 holds the sum of s + 2 ranks' parts.
  for (int s = 0; s < d - 1; ++s) {
    torch::Tensor into = chunk(r - s - 1);
    torch::Tensor theirs = scratch.narrow(0, 0, into.numel());
    auto recv = group.Recv(theirs, prev, tag(s));
    if (absl::Status st = both(group.Send(chunk(r - s), next, tag(s)), std::move(recv)); !st.ok()) {
      return st;
    }
    into.add_(theirs);
  }
  chunk(r + 1).div_(d);  // this rank's chunk is whole: its average goes round as it is
  // All-gather: after step s, chunk r - s is the owner's average.
  for (int s = 0; s < d - 1; ++s) {
    auto recv = group.Recv(chunk(r - s), prev, tag(d - 1 + s));
    if (absl::Status st = both(group.Send(chunk(r + 1 - s), next, tag(d - 1 + s)), std::move(recv));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker::internal
