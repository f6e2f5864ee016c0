// Authentication and roles: who is calling the coordinator, and whether that role may make a call.
//
// Callers present a bearer token (gRPC metadata or HTTP header `authorization: Bearer TOKEN`).
// Tokens come from one file per role, given to zpipe-coordinator:
//   --client-tokens FILE   client: submit, list, status, watch, plan, trace, logs, workers, and
//                          cancel the jobs it submitted
//   --admin-tokens FILE    admin: everything a client may, and cancel any job
//   --worker-tokens FILE   worker: register, session (heartbeats, reports), rendezvous
// One token per line, optionally `NAME:TOKEN` (split at the first ':'); blank lines and lines
// starting with '#' are ignored; a token has at least 16 characters and no whitespace. The name is
// what a job records as its submitter; a token without one is named "sha256:" plus the first 8 hex
// digits of its SHA-256 (never the token itself). A token listed twice, in one file or in two, is
// an error naming the file and line.
//
// With no file at all the authenticator is open: every call is allowed and the principal has role
// kOpen (the coordinator then listens on loopback only; see server.h).
//
// Tokens are kept as SHA-256 digests and every presented token is compared against all of them
// with CRYPTO_memcmp, so neither the time taken nor an early exit tells which bytes matched.
// Thread-safe; Reload() swaps the whole set at once.
#ifndef ZPIPE_COORDINATOR_AUTH_H_
#define ZPIPE_COORDINATOR_AUTH_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zpipe::coordinator {

enum class Role { kOpen, kClient, kAdmin, kWorker };
absl::string_view RoleName(Role role);  // "open", "client", "admin", "worker"

// The caller of one request.
struct Principal {
  Role role = Role::kOpen;
  std::string name;  // the token's name; empty for kOpen
};

struct TokenFiles {
  std::string client;  // paths; empty = none for that role
  std::string worker;
  std::string admin;
  bool any() const { return !client.empty() || !worker.empty() || !admin.empty(); }
};

// One parsed token-file line.
struct TokenEntry {
  std::string name;
  std::string token;
};

// Parses the text of a token file (see above); `source` names it in errors ("FILE:LINE: ...").
// INVALID_ARGUMENT for a malformed line. Never puts a token into an error message.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text,
                                                       absl::string_view source);

// "sha256:" and the first 8 hex digits of SHA-256(token).
std::string TokenFingerprint(absl::string_view token);

class Authenticator {
 public:
  // Reads `files`. An empty TokenFiles gives an open authenticator. The error of the first file
  // that cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(TokenFiles files);
  // Open; for tests and embedders that want no authentication.
  static std::unique_ptr<Authenticator> Open();

  bool enabled() const { return files_.any(); }
  const TokenFiles& files() const { return files_; }

  // Re-reads the files (SIGHUP). On any error the current tokens stay in force and the error is
  // returned; on success returns OK and the new set is used by every later Authenticate().
  absl::Status Reload();
  // How many tokens are loaded per role (for the log).
  std::string Summary() const;

  // `authorization`: the request's authorization metadata value, nullopt when it has none.
  // Open: a kOpen principal whatever is sent. Otherwise UNAUTHENTICATED when there is no token, it
  // is not "Bearer TOKEN", or TOKEN is not in any file.
  absl::StatusOr<Principal> Authenticate(std::optional<absl::string_view> authorization) const;

 private:
  struct Key {
    std::array<unsigned char, 32> digest;
    Role role;
    std::string name;
  };
  explicit Authenticator(TokenFiles files) : files_(std::move(files)) {}
  absl::StatusOr<std::vector<Key>> Load() const;

  const TokenFiles files_;
  mutable absl::Mutex mu_;
  // Replaced whole by Reload(); a reader keeps the set it took.
  std::shared_ptr<const std::vector<Key>> keys_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<const std::vector<Key>>();
};

// OK when `principal` may make `call`, which needs `role`: kClient calls accept client and admin
// tokens, kAdmin calls admin tokens, kWorker calls worker tokens; a kOpen principal may do
// everything. PERMISSION_DENIED naming the call and the role it needs otherwise.
absl::Status Authorize(const Principal& principal, Role role, absl::string_view call);

// Whether "HOST:PORT" (gRPC or civetweb syntax, or a unix: socket) only accepts local
// connections: 127.0.0.0/8, ::1, localhost, unix sockets.
bool IsLoopbackAddress(absl::string_view host_port);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_AUTH_H_
