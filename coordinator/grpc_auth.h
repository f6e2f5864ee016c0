// The gRPC edge of authentication: the caller of a request from its `authorization` metadata.
#ifndef ZPIPE_COORDINATOR_GRPC_AUTH_H_
#define ZPIPE_COORDINATOR_GRPC_AUTH_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth.h"
#include "grpcpp/server_context.h"

namespace zpipe::coordinator {

// Authenticates the call and checks that its role may make `call` (which needs `role`; see
// Authorize). UNAUTHENTICATED / PERMISSION_DENIED as Authenticate / Authorize say.
inline absl::StatusOr<Principal> CallerOf(const Authenticator& auth, const grpc::ServerContextBase& ctx,
                                          Role role, absl::string_view call) {
  std::optional<absl::string_view> value;
  const auto& metadata = ctx.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    value = absl::string_view(it->second.data(), it->second.size());
  }
  absl::StatusOr<Principal> principal = auth.Authenticate(value);
  if (!principal.ok()) return principal.status();
  if (absl::Status st = Authorize(*principal, role, call); !st.ok()) return st;
  return principal;
}

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_GRPC_AUTH_H_
