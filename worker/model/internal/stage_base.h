// Internal: what every Stage implementation shares — its options, its WeightGradStore and W, and
// the last stage's per-microbatch losses.
#ifndef ZPIPE_WORKER_MODEL_INTERNAL_STAGE_BASE_H_
#define ZPIPE_WORKER_MODEL_INTERNAL_STAGE_BASE_H_

#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/model/internal/torch_status.h"
#include "worker/model/stage.h"
#include "worker/model/weight_grad_store.h"

namespace zpipe::worker::model::internal {

class StageBase : public Stage {
 public:
  explicit StageBase(const StageOptions& options) : options_(options), store_(options.stage) {}

  int stage() const override { return options_.stage; }
  bool reports_grad_landings() const override { return true; }
  int num_stages() const override { return options_.num_stages; }

  // W(s,i): runs exactly microbatch i's queued weight-gradient closures, in push order, and
  // reports each parameter's gradient as its closure lands it.
  absl::Status BackwardWeight(int mb) override {
    absl::StatusOr<std::vector<WeightGradStore::Work>> work = store_.Take(mb);
    if (!work.ok()) return work.status();
    return GuardTorch(stage(), "W", mb, [&]() -> absl::Status {
      for (const WeightGradStore::Work& w : *work) {
        w.run();
        for (int param : w.params) NotifyGradLanded(param);
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<float> Loss(int mb) const override {
    auto it = losses_.find(mb);
    if (it == losses_.end()) {
      return absl::NotFoundError(absl::StrCat("stage ", stage(), " microbatch ", mb,
                                              ": no loss (not the last stage, or F not run)"));
    }
    // Read here, not in F: on a GPU the read waits for the device, so the executor asks once
    // the iteration's actions are queued.
    return it->second.item<float>();
  }
  void ClearLosses() override { losses_.clear(); }

 protected:
  // At the end of a successful B: every B-phase parameter's accumulations of one microbatch.
  void NotifyBPhaseGrads() const {
    const std::vector<ParamInfo>& ps = params();
    for (size_t k = 0; k < ps.size(); ++k) {
      if (ps[k].phase != GradPhase::kB) continue;
      for (int n = 0; n < ps[k].accumulations_per_microbatch; ++n) {
        NotifyGradLanded(static_cast<int>(k));
      }
    }
  }

  // The gradient B starts from, for graph root `root` (the stage output, or the last stage's
  // loss): the caller's `grad_output`, shaped like the output; for the last stage an undefined
  // tensor means 1/m (the loss is the mean over microbatches) and a scalar is used as given.
  // InvalidArgument naming the stage and microbatch otherwise.
  absl::StatusOr<torch::Tensor> OutputGrad(int mb, const torch::Tensor& root,
                                           const torch::Tensor& grad_output) const {
    if (is_last()) {
      if (!grad_output.defined()) {
        return torch::full({}, 1.0 / options_.num_microbatches, root.options());
      }
      if (grad_output.numel() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", stage(), " B microbatch ", mb,
                         ": the last stage takes an undefined or scalar loss gradient"));
      }
      return grad_output.reshape({}).to(root.options());
    }
    if (!grad_output.defined() || grad_output.sizes() != root.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", stage(), " B microbatch ", mb,
          ": output gradient must be shaped like the output ", c10::str(root.sizes()), ", got ",
          grad_output.defined() ? c10::str(grad_output.sizes()) : "undefined"));
    }
    return grad_output;
  }

  // The queued weight work and the loss of `mb` (FreeMicrobatch's shared part).
  void DropQueued(int mb) {
    store_.Drop(mb);
    losses_.erase(mb);
  }

  const StageOptions options_;
  // Destroyed after the derived class's members, so graphs they hold that point into the store
  // go first.
  WeightGradStore store_;
  std::map<int, torch::Tensor> losses_;  // detached scalars, on the stage's device
};

}  // namespace zpipe::worker::model::internal

#endif  // ZPIPE_WORKER_MODEL_INTERNAL_STAGE_BASE_H_
