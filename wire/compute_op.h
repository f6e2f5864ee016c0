// The progress stream's op codes and core's action kinds: the one conversion each way.
//
// A worker reports every action it ran as a v1::ComputeOp (ProgressBatch.ops, job.proto); the
// coordinator reads them back as core::ActionKind, the one op vocabulary behind the wire (plans,
// progress, timelines). The mapping lives here, once, for every side that speaks it: the worker,
// the coordinator, and the test and benchmark workers that stand in for real ones.
#ifndef ZPIPE_WIRE_COMPUTE_OP_H_
#define ZPIPE_WIRE_COMPUTE_OP_H_

#include <cstdint>
#include <optional>

#include "core/plan.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe::wire {

// Every action kind has its op (F, B, W and BW count as progress; R, sends, receives and
// reductions go on the executed timeline only).
v1::ComputeOp ComputeOpOf(core::ActionKind kind);

// The action kind of a ComputeOp as it arrived: an int, since proto3 enums are open and a newer
// worker may send a value this build does not know. nullopt for COMPUTE_OP_UNSPECIFIED and for
// unknown values; readers skip such events.
std::optional<core::ActionKind> ActionKindOf(int32_t op);

}  // namespace zpipe::wire

#endif  // ZPIPE_WIRE_COMPUTE_OP_H_
