// TlsRelay: the coordinator's public HTTP(S) port. Accepts connections on one address and relays
// each byte stream to a plaintext HTTP server on a loopback port (the civetweb server of
// http_server.h, which serves the pages); with TLS it ends TLS first.
//
// Why not civetweb's own TLS: Debian's civetweb 1.15 loads libssl at run time by the OpenSSL 1.1
// names and crashes on the first TLS connection with OpenSSL 3. The relay uses the OpenSSL the
// coordinator links, with the context of tls.h (TLS 1.2+, the coordinator's certificate, client
// certificates required with a client CA).
//
// Why a relay without TLS too: civetweb gives each connection one of its few threads while it
// reads the request head, so a few hundred half-open connections (slowloris) starved it. The
// relay holds a connection until its first request head is complete (HTTP headers up to the
// blank line), and only then connects to civetweb, so civetweb's threads only ever see complete
// requests. Limits (RelayLimits), all enforced by the accepting thread:
//   - a connection whose first request head (with TLS: the handshake too) is not complete within
//     header_timeout is closed; so is one that moves no byte for idle_timeout;
//   - at most max_connections at a time, and at most max_per_address from one peer address;
//   - a connection beyond either cap first closes the connection (of that address, or of any
//     for the global cap) that is still sending its request head, the longest-waiting one;
//     failing that, the one whose last byte moved longest ago, if that is at least
//     min_idle_to_evict ago; only when none qualifies is the new connection closed at once.
// So a flood of idle or slow connections, from one address or many, cannot keep a prompt
// request (a probe, a scrape) out. A plaintext request to a TLS port gets no answer: its
// handshake fails and the connection is closed.
// One thread per connection. Thread-safe; the destructor stops accepting, closes every
// connection and joins the threads.
#ifndef ZPIPE_COORDINATOR_TLS_RELAY_H_
#define ZPIPE_COORDINATOR_TLS_RELAY_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/tls.h"

namespace zpipe::coordinator {

struct RelayLimits {
  int max_connections = 256;
  int max_per_address = 32;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(30);
  absl::Duration min_idle_to_evict = absl::Seconds(1);
};

class TlsRelay {
 public:
  // Listens on `host_port` ("0.0.0.0:9464"; port 0 = pick one) and relays to 127.0.0.1:`backend`,
  // over TLS when `tls` is not null. INVALID_ARGUMENT for a bad address, UNAVAILABLE when it
  // cannot listen, INTERNAL when OpenSSL refuses `tls`.
  static absl::StatusOr<std::unique_ptr<TlsRelay>> Start(const std::string& host_port,
                                                         int backend_port, const ServerTlsPem* tls,
                                                         const RelayLimits& limits = {});
  ~TlsRelay();

  int port() const { return port_; }
  // Connections closed to make room for a new one (for tests and logs).
  int64_t evicted() const { return evicted_.load(); }

 private:
  struct Connection {
    int client_fd = -1;
    std::string peer;  // the peer's address, without port
    absl::Time accepted;
    std::thread thread;
    std::atomic<int64_t> last_active_ns{0};  // absl::GetCurrentTimeNanos of the last byte moved
    std::atomic<bool> head_done{false};      // the first request head is with the backend
    std::atomic<bool> done{false};
    // Shut down by the acceptor. Guarded by TlsRelay::mu_ (which an annotation here cannot name).
    bool closing = false;
  };

  TlsRelay() = default;
  void AcceptLoop();
  void Serve(Connection& c);
  // Joins finished connection threads.
  void ReapDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes connections past header_timeout / idle_timeout.
  void EnforceDeadlines() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the best eviction candidate among open connections (of `peer`, or all when empty);
  // false when none qualifies.
  bool EvictOne(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(Connection& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RelayLimits limits_;
  ssl_ctx_st* ctx_ = nullptr;  // owned; null without TLS
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a byte on wake_[1] ends AcceptLoop
  int port_ = 0;
  int backend_port_ = 0;
  std::atomic<int64_t> evicted_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TLS_RELAY_H_
