// Proto adapter for GetTrace: TraceView -> v1::GetTraceResponse.
#ifndef ZPIPE_COORDINATOR_TRACE_PROTO_H_
#define ZPIPE_COORDINATOR_TRACE_PROTO_H_

#include <string>

#include "coordinator/job_manager.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::coordinator {

// Times become seconds relative to the iteration's first executed start (start_time); the
// predicted timeline starts at 0.
void TraceToProto(const std::string& job_id, const TraceView& view, v1::GetTraceResponse* out);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TRACE_PROTO_H_
