#include "coordinator/tls_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {
namespace {

// Writes all of `data` to a plain socket; false when the peer is gone.
bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The first request head may be this long; a longer one goes on to civetweb, which refuses it.
constexpr size_t kMaxHeadBytes = 64 << 10;

std::string PeerAddress(const sockaddr_storage& from) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (from.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&from)->sin_addr, text, sizeof(text));
  } else if (from.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&from)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsRelay>> TlsRelay::Start(const std::string& host_port,
                                                          int backend_port,
                                                          const ServerTlsPem* tls,
                                                          const RelayLimits& limits) {
  const char* scheme = tls != nullptr ? "https" : "http";
  const size_t colon = host_port.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(scheme, ": bad address '", host_port, "': want HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<TlsRelay> r(new TlsRelay());
  r->backend_port_ = backend_port;
  r->limits_ = limits;
  if (tls != nullptr) {
    r->ctx_ = SSL_CTX_new(TLS_server_method());
    if (r->ctx_ == nullptr) return absl::InternalError("https: OpenSSL cannot make a context");
    if (absl::Status st = ConfigureServerSslContext(r->ctx_, *tls); !st.ok()) return st;
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int err =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(scheme, ": cannot resolve '", host_port, "': ", gai_strerror(err)));
  }
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && r->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      r->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (r->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(scheme, ": cannot listen on ", host_port, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(r->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  r->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(r->wake_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat(scheme, ": pipe: ", std::strerror(errno)));
  }
  r->acceptor_ = std::thread([raw = r.get()] { raw->AcceptLoop(); });
  return r;
}

TlsRelay::~TlsRelay() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (Connection& c : connections_) shutdown(c.client_fd, SHUT_RDWR);  // wakes Serve
  }
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  for (Connection& c : connections_) {
    if (c.thread.joinable()) c.thread.join();
    close(c.client_fd);
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void TlsRelay::ReapDone() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done.load()) {
      it->thread.join();
      close(it->client_fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TlsRelay::Close(Connection& c) {
  c.closing = true;
  shutdown(c.client_fd, SHUT_RDWR);  // wakes Serve, which then finishes
}

void TlsRelay::EnforceDeadlines() {
  const absl::Time now = absl::Now();
  for (Connection& c : connections_) {
    if (c.closing || c.done.load()) continue;
    if (!c.head_done.load() && now - c.accepted > limits_.header_timeout) {
      Close(c);
    } else if (now - absl::FromUnixNanos(c.last_active_ns.load()) > limits_.idle_timeout) {
      Close(c);
    }
  }
}

bool TlsRelay::EvictOne(const std::string& peer) {
  const absl::Time now = absl::Now();
  Connection* waiting = nullptr;  // still sending its first request head, the longest so
  Connection* idle = nullptr;     // past its head, its last byte longest ago
  for (Connection& c : connections_) {
    if (c.closing || c.done.load() || (!peer.empty() && c.peer != peer)) continue;
    if (!c.head_done.load()) {
      if (waiting == nullptr || c.accepted < waiting->accepted) waiting = &c;
    } else if (idle == nullptr || c.last_active_ns.load() < idle->last_active_ns.load()) {
      idle = &c;
    }
  }
  Connection* victim = waiting;
  if (victim == nullptr && idle != nullptr &&
      now - absl::FromUnixNanos(idle->last_active_ns.load()) >= limits_.min_idle_to_evict) {
    victim = idle;
  }
  if (victim == nullptr) return false;
  Close(*victim);
  evicted_.fetch_add(1);
  return true;
}

void TlsRelay::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, 200) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    absl::MutexLock lock(&mu_);
    ReapDone();
    if (stopping_) return;
    EnforceDeadlines();
    if ((fds[0].revents & POLLIN) == 0) continue;
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string peer = PeerAddress(from);
    int open = 0, open_from_peer = 0;
    for (const Connection& c : connections_) {
      if (c.closing || c.done.load()) continue;
      ++open;
      if (c.peer == peer) ++open_from_peer;
    }
    if ((open_from_peer >= limits_.max_per_address && !EvictOne(peer)) ||
        (open >= limits_.max_connections && open_from_peer < limits_.max_per_address &&
         !EvictOne(""))) {
      close(fd);
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.client_fd = fd;
    c.peer = peer;
    c.accepted = absl::Now();
    c.last_active_ns.store(absl::GetCurrentTimeNanos());
    c.thread = std::thread([this, &c] { Serve(c); });
  }
}

void TlsRelay::Serve(Connection& c) {
  // OpenSSL writes with write(2): a client gone mid-reply must not SIGPIPE the coordinator.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

  SSL* ssl = nullptr;
  const bool tls_ok = ctx_ == nullptr || ((ssl = SSL_new(ctx_)) != nullptr &&
                                          SSL_set_fd(ssl, c.client_fd) == 1 &&
                                          SSL_accept(ssl) == 1);
  auto touch = [&c] { c.last_active_ns.store(absl::GetCurrentTimeNanos()); };
  // Reads from the client (decrypting with TLS); <= 0 when it is gone or was closed.
  auto read_client = [&](char* buf, int size) -> int {
    if (ssl != nullptr) return SSL_read(ssl, buf, size);
    ssize_t n;
    do {
      n = recv(c.client_fd, buf, static_cast<size_t>(size), 0);
    } while (n < 0 && errno == EINTR);
    return static_cast<int>(n);
  };
  auto write_client = [&](const char* buf, size_t size) -> bool {
    if (ssl != nullptr) return SSL_write(ssl, buf, static_cast<int>(size)) == static_cast<int>(size);
    return SendAll(c.client_fd, buf, size);
  };

  int backend = -1;
  char buf[16384];
  std::string head;
  bool open = tls_ok;
  // The first request head, complete (or over kMaxHeadBytes, for civetweb to refuse), before
  // the backend sees a byte. The acceptor closes the connection at header_timeout.
  while (open && head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxHeadBytes) {
    const int n = read_client(buf, sizeof(buf));
    open = n > 0;
    if (open) {
      head.append(buf, static_cast<size_t>(n));
      touch();
    }
  }
  if (open) {
    c.head_done.store(true);
    backend = ConnectLoopback(backend_port_);
    open = backend >= 0 && SendAll(backend, head.data(), head.size());
  }
  while (open) {
    pollfd fds[2] = {{c.client_fd, POLLIN, 0}, {backend, POLLIN, 0}};
    // Bytes OpenSSL already decrypted do not show on the socket.
    const bool pending = ssl != nullptr && SSL_pending(ssl) > 0;
    const int ready = pending ? 1 : poll(fds, 2, absl::ToInt64Milliseconds(limits_.idle_timeout));
    if (ready == 0) break;  // idle
    if (ready < 0 && errno != EINTR) break;
    if (pending || fds[0].revents != 0) {
      const int n = read_client(buf, sizeof(buf));
      open = n > 0 && SendAll(backend, buf, static_cast<size_t>(n));
      touch();
    }
    if (open && fds[1].revents != 0) {
      const ssize_t n = recv(backend, buf, sizeof(buf), 0);
      open = n > 0 && write_client(buf, static_cast<size_t>(n));
      touch();
    }
  }
  if (ssl != nullptr) {
    if (tls_ok) SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  if (backend >= 0) close(backend);
  shutdown(c.client_fd, SHUT_RDWR);  // the fd itself is closed by whoever joins this thread
  c.done.store(true);
}

}  // namespace zpipe::coordinator
