// TlsRelay: the coordinator's HTTPS port. Accepts TLS connections on one address and relays each
// decrypted byte stream to a plaintext HTTP server on a loopback port (the civetweb server of
// http_server.h, which serves the pages).
//
// Why not civetweb's own TLS: Debian's civetweb 1.15 loads libssl at run time by the OpenSSL 1.1
// names and crashes on the first TLS connection with OpenSSL 3. The relay uses the OpenSSL the
// coordinator links, with the context of tls.h (TLS 1.2+, the coordinator's certificate, client
// certificates required with a client CA).
//
// One thread per connection, at most kMaxConnections at a time (more are closed at once); a
// connection that completes no handshake, or moves no byte, for kIdleTimeout is closed. A
// plaintext request gets no answer: its handshake fails and the connection is closed.
// Thread-safe; the destructor stops accepting, closes every connection and joins the threads.
#ifndef ZPIPE_COORDINATOR_TLS_RELAY_H_
#define ZPIPE_COORDINATOR_TLS_RELAY_H_

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "coordinator/tls.h"

namespace zpipe::coordinator {

class TlsRelay {
 public:
  static constexpr int kMaxConnections = 64;
  static constexpr int kIdleTimeoutSeconds = 30;

  // Listens on `host_port` ("0.0.0.0:9464"; port 0 = pick one) and relays to 127.0.0.1:`backend`.
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot listen, INTERNAL when OpenSSL
  // refuses `tls`.
  static absl::StatusOr<std::unique_ptr<TlsRelay>> Start(const std::string& host_port,
                                                         int backend_port, const ServerTlsPem& tls);
  ~TlsRelay();

  int port() const { return port_; }

 private:
  struct Connection {
    int client_fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  TlsRelay() = default;
  void AcceptLoop();
  void Serve(Connection& c);
  void ReapDone();  // joins finished connection threads; needs mu_

  ssl_ctx_st* ctx_ = nullptr;  // owned
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a byte on wake_[1] ends AcceptLoop
  int port_ = 0;
  int backend_port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;  // guards connections_ and stopping_
  std::list<Connection> connections_;
  bool stopping_ = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TLS_RELAY_H_
