// absl::Status <-> grpc::Status. The canonical codes are the same numbers in both.
#ifndef ZPIPE_COORDINATOR_GRPC_STATUS_H_
#define ZPIPE_COORDINATOR_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace zpipe::coordinator {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_GRPC_STATUS_H_
