// TLS for the coordinator's two ports: --tls-cert and --tls-key (PEM) serve gRPC and the HTTP
// port over TLS with one certificate; --tls-client-ca (PEM) additionally requires every caller of
// either port to present a certificate that CA signed (mTLS).
//
// LoadServerTls reads and checks everything at start-up, so a wrong file fails there with its
// flag and path instead of as a gRPC log line or a refused handshake later.
#ifndef ZPIPE_COORDINATOR_TLS_H_
#define ZPIPE_COORDINATOR_TLS_H_

#include <string>

#include "absl/status/statusor.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace zpipe::coordinator {

struct ServerTlsFiles {
  std::string cert;       // --tls-cert: the server's certificate chain; empty = plaintext
  std::string key;        // --tls-key: its private key
  std::string client_ca;  // --tls-client-ca: CA of client certificates; empty = none asked for
  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
};

// What LoadServerTls read: PEM text.
struct ServerTlsPem {
  std::string cert_chain;
  std::string private_key;
  std::string client_ca;  // empty = no client certificates (plain TLS)
  bool mutual() const { return !client_ca.empty(); }
};

// Reads and checks the files of `files` (which must be enabled()): --tls-cert and --tls-key are
// both required, each file must be readable PEM, the key must match the certificate, and the
// client CA must hold at least one certificate. INVALID_ARGUMENT naming the flag and path.
absl::StatusOr<ServerTlsPem> LoadServerTls(const ServerTlsFiles& files);

// Sets up an OpenSSL server context for `pem`: TLS 1.2 or newer, its certificate chain and key;
// with a client CA, client certificates are required and verified. INTERNAL if OpenSSL refuses
// what LoadServerTls accepted.
absl::Status ConfigureServerSslContext(ssl_ctx_st* ctx, const ServerTlsPem& pem);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TLS_H_
