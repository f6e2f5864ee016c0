#include "wire/compute_op.h"

namespace zpipe::wire {

v1::ComputeOp ComputeOpOf(core::ActionKind kind) {
  switch (kind) {
    case core::ActionKind::kForward:
      return v1::COMPUTE_OP_F;
    case core::ActionKind::kBackwardInput:
      return v1::COMPUTE_OP_B;
    case core::ActionKind::kBackwardWeight:
      return v1::COMPUTE_OP_W;
    case core::ActionKind::kBackwardFull:
      return v1::COMPUTE_OP_BW;
    case core::ActionKind::kSendAct:
      return v1::COMPUTE_OP_SEND_ACT;
    case core::ActionKind::kRecvAct:
      return v1::COMPUTE_OP_RECV_ACT;
    case core::ActionKind::kSendGrad:
      return v1::COMPUTE_OP_SEND_GRAD;
    case core::ActionKind::kRecvGrad:
      return v1::COMPUTE_OP_RECV_GRAD;
    case core::ActionKind::kReduce:
      return v1::COMPUTE_OP_REDUCE;
    case core::ActionKind::kRecompute:
      return v1::COMPUTE_OP_R;
  }
  return v1::COMPUTE_OP_UNSPECIFIED;
}

std::optional<core::ActionKind> ActionKindOf(int32_t op) {
  switch (op) {
    case v1::COMPUTE_OP_F:
      return core::ActionKind::kForward;
    case v1::COMPUTE_OP_B:
      return core::ActionKind::kBackwardInput;
    case v1::COMPUTE_OP_W:
      return core::ActionKind::kBackwardWeight;
    case v1::COMPUTE_OP_BW:
      return core::ActionKind::kBackwardFull;
    case v1::COMPUTE_OP_SEND_ACT:
      return core::ActionKind::kSendAct;
    case v1::COMPUTE_OP_RECV_ACT:
      return core::ActionKind::kRecvAct;
    case v1::COMPUTE_OP_SEND_GRAD:
      return core::ActionKind::kSendGrad;
    case v1::COMPUTE_OP_RECV_GRAD:
      return core::ActionKind::kRecvGrad;
    case v1::COMPUTE_OP_REDUCE:
      return core::ActionKind::kReduce;
    case v1::COMPUTE_OP_R:
      return core::ActionKind::kRecompute;
    default:
      return std::nullopt;
  }
}

}  // namespace zpipe::wire
