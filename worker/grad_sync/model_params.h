// Bridges worker/model's per-stage parameter list (model::Stage::params()) to grad sync's
// ParamInfo, so the executor can build a GradSync and attach the gradients in one place.
// Header-only: grad sync does not link the model library.
#ifndef ZPIPE_WORKER_GRAD_SYNC_MODEL_PARAMS_H_
#define ZPIPE_WORKER_GRAD_SYNC_MODEL_PARAMS_H_

#include <torch/torch.h>

#include <vector>

#include "worker/grad_sync/grad_sync.h"
#include "worker/model/stage.h"

namespace zpipe::worker {

// One entry per model parameter, in the model's order (that order is the parameter index that
// OnContribution and AttachGrads use).
inline std::vector<ParamInfo> ParamsFromModel(const std::vector<model::ParamInfo>& params) {
  std::vector<ParamInfo> out;
  out.reserve(params.size());
  for (const model::ParamInfo& p : params) {
    ParamInfo info;
    info.name = p.name;
    info.numel = p.tensor.numel();
    info.layer = p.layer;
    info.grads_in_b = p.phase == model::GradPhase::kB;
    info.grads_in_w = p.phase == model::GradPhase::kW;
    info.uses_per_microbatch = p.accumulations_per_microbatch;
    out.push_back(std::move(info));
  }
  return out;
}

// The parameter tensors, in the same order, for GradSync::AttachGrads.
inline std::vector<torch::Tensor> TensorsFromModel(const std::vector<model::ParamInfo>& params) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const model::ParamInfo& p : params) out.push_back(p.tensor);
  return out;
}

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_GRAD_SYNC_MODEL_PARAMS_H_
