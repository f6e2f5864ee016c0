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
    return it->second;
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

  // The queued weight work and the loss of `mb` (FreeMicrobatch's shared part).
  void DropQueued(int mb) {
    store_.Drop(mb);
    losses_.erase(mb);
  }

  const StageOptions options_;
  // Destroyed after the derived class's members, so graphs they hold that point into the store
  // go first.
  WeightGradStore store_;
  std::map<int, float> losses_;
};

}  // namespace zpipe::worker::model::internal

#endif  // ZPIPE_WORKER_MODEL_INTERNAL_STAGE_BASE_H_
