// Adapters between coordinator domain types and zpipe.v1 worker-service messages (worker.proto).
#ifndef ZPIPE_COORDINATOR_WORKER_PROTO_H_
#define ZPIPE_COORDINATOR_WORKER_PROTO_H_

#include "absl/status/statusor.h"
#include "coordinator/domain.h"
#include "coordinator/job_manager.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe::coordinator {

// InvalidArgument for an unspecified or unknown device kind.
absl::StatusOr<WorkerRegistration> RegistrationFromProto(const v1::RegisterWorkerRequest& proto);
v1::Worker WorkerInfoToProto(const WorkerInfo& info);
v1::Assignment AssignmentToProto(const AssignmentData& assignment);
void CommandToProto(const WorkerCommand& command, v1::CoordinatorMessage* out);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_PROTO_H_
