// ParamInfo: one parameter of a stage with its gradient accounting, the one description of a
// parameter the model exposes (Stage::params()) and gradient sync packs into buckets and counts
// down (worker/grad_sync/grad_sync.h).
//
// Header-only (Torch and core/plan.h), so grad sync uses it without linking the model library.
#ifndef ZPIPE_WORKER_MODEL_PARAM_INFO_H_
#define ZPIPE_WORKER_MODEL_PARAM_INFO_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/plan.h"

namespace zpipe::worker::model {

// When a parameter's gradient is accumulated.
enum class GradPhase {
  kB,  // during B (LayerNorm, embeddings): autograd accumulates it with the input gradient
  kW,  // during W (split linear weights and biases): a queued closure accumulates it
};

inline const char* GradPhaseName(GradPhase phase) { return phase == GradPhase::kB ? "B" : "W"; }

struct ParamInfo {
  std::string name;  // global name, identical to the reference model's ("layers.3.mlp.fc1.weight")
  torch::Tensor tensor;  // the parameter itself (shares storage and .grad with the stage's)
  GradPhase phase = GradPhase::kW;
  int accumulations_per_microbatch = 1;  // .grad accumulations per microbatch (B, W or BW)
  int layer = 0;  // position in the whole model: -1 embeddings, 0..L-1 blocks, L final/head
};

// Accumulations into `p`'s .grad that one compute action of `kind` (B, W or BW) on one
// microbatch issues: what the executor and grad sync count down per bucket. 0 for F and
// non-compute actions.
inline int Accumulations(const ParamInfo& p, core::ActionKind kind) {
  const bool now = kind == core::ActionKind::kBackwardFull ||
                   (kind == core::ActionKind::kBackwardInput && p.phase == GradPhase::kB) ||
                   (kind == core::ActionKind::kBackwardWeight && p.phase == GradPhase::kW);
  return now ? p.accumulations_per_microbatch : 0;
}

// The parameter tensors, in the same order (for GradSync::AttachGrads).
inline std::vector<torch::Tensor> ParamTensors(const std::vector<ParamInfo>& params) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const ParamInfo& p : params) out.push_back(p.tensor);
  return out;
}

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_PARAM_INFO_H_
