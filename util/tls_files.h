// TLS material from files, as the zpipe CLI, zpipe::Client users and zpipe-worker name it: the
// CA that signed the coordinator's certificate (--tls-ca or $ZPIPE_TLS_CA) and, for a coordinator
// that requires client certificates (mTLS), this side's certificate chain and key (--tls-cert,
// --tls-key). Only reading and checking the files lives here; the gRPC credentials are made at
// each channel (client/grpc_client.cc, worker/daemon/worker_daemon.cc), so util stays free of
// gRPC.
#ifndef ZPIPE_UTIL_TLS_FILES_H_
#define ZPIPE_UTIL_TLS_FILES_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::util {

// PEM text a TLS client presents and trusts. Empty root_certs = the system's roots; empty
// cert_chain and private_key = no client certificate.
struct TlsClientPem {
  std::string root_certs;
  std::string cert_chain;
  std::string private_key;
};

// One file and where its name came from ("--tls-ca", "ZPIPE_TLS_CA"), for error messages.
struct NamedFile {
  std::string source;
  std::string path;  // empty = not given
};

// Reads `file.path` (at most 1 MiB). INVALID_ARGUMENT "SOURCE PATH: cannot read: REASON" or
// "SOURCE PATH: not a PEM file (no -----BEGIN line)".
absl::StatusOr<std::string> ReadPemFile(const NamedFile& file);

// nullopt when none of the three is given (plaintext). TLS when any is: `cert` and `key` must be
// given together; each file must be readable PEM (errors as ReadPemFile, or naming the missing
// half of a certificate/key pair).
absl::StatusOr<std::optional<TlsClientPem>> LoadTlsClientPem(const NamedFile& ca,
                                                             const NamedFile& cert,
                                                             const NamedFile& key);

// Whether a failed call's message (gRPC reports a failed handshake as UNAVAILABLE, like a refused
// connection) points at TLS: it names the handshake or a certificate when this side refused, or
// the connection was closed while connecting (a plaintext client at a TLS port, a missing client
// certificate), where a coordinator that is down refuses the connection instead.
bool LooksLikeTlsFailure(absl::string_view message);

// Whether a gRPC target or listen address ("host:port", "[::1]:port", "ipv4:...", "unix:...")
// stays on this machine (a bare port, every interface, does not):
// localhost, 127.0.0.0/8, ::1 or a Unix socket. A token sent elsewhere without TLS crosses the
// network readable by anyone on the path (the CLI and the worker warn, or with --require-tls
// refuse).
bool IsLoopbackTarget(absl::string_view target);

// The warning (require_tls false) or error (true) for sending a token to `target` without TLS;
// "" when that is fine (TLS on, no token, or a loopback target). `who` names the sender ("zpipe",
// "zpipe-worker"), `tls_flag` the flag that turns TLS on for it.
std::string PlaintextTokenProblem(absl::string_view who, absl::string_view target, bool has_token,
                                  bool tls, bool require_tls, absl::string_view tls_flag);

}  // namespace zpipe::util

#endif  // ZPIPE_UTIL_TLS_FILES_H_
