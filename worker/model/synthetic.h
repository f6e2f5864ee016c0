// Synthetic stage: F, B and W take configured durations and move tensors of a configured size
// without real math, so large pipelines (p = 8..32) run faithfully on a few cores.
//
// Timing: each action records its start on std::chrono::steady_clock and ends at start + its
// duration. The default waits with sleep_until (then yield-spins the last 200 us), so many worker
// processes can share two cores without stealing each other's time (what matters for pipeline
// fidelity is when an action ends, not that a core is busy); Timing::kSpin busy-waits instead, for
// sub-millisecond precision on an otherwise idle machine. The small real work an action does
// (allocating the activation, accumulating gradients) happens inside its duration; an action only
// runs long when that work alone exceeds the configured time.
//
// Tensors: F returns an activation of activation_kb KiB (float32, shape [n]); B returns an input
// gradient of the same size (undefined on the first stage); the last stage's F returns the
// scalar loss 4 / (1 + 0.01 k) for its k-th forward since construction (k = 0, 1, ...), so a
// synthetic job shows a deterministic, falling loss curve.
// Parameters: params_mb MB (1e6 bytes) of float32 split in `param_tensors` equal tensors (0: as
// many as it takes to keep each at most 4 MB), one per synthetic "layer", all accumulated during
// W: each W adds 1/m to every element, so after a full iteration of m microbatches every gradient
// element is exactly 1 (handy for checking gradient sync). W works like a real backward: last
// layer first, each tensor taking its share of weight_ms by size and reported (Stage's gradient
// observer) the moment it is done.
#ifndef ZPIPE_WORKER_MODEL_SYNTHETIC_H_
#define ZPIPE_WORKER_MODEL_SYNTHETIC_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/stage.h"

namespace zpipe::worker::model {

// Costs of ONE stage (the coordinator already divides the per-rank spec by v; see
// Assignment.stage_costs).
struct SyntheticStageConfig {
  enum class Timing { kSleep, kSpin };
  double forward_ms = 0;     // T_F
  double backward_ms = 0;    // T_B
  double weight_ms = 0;      // T_W
  double activation_kb = 0;  // KiB of activation (and gradient) per microbatch
  double params_mb = 0;      // MB of parameters (and gradients) on this stage
  int param_tensors = 0;     // parameter tensors ("layers"); 0 = one per 4 MB
  Timing timing = Timing::kSleep;
  // Cost drift (SyntheticModel.w_slowdown): while *iteration >= w_slowdown_after, W takes
  // w_slowdown_factor x weight_ms. `iteration` (the iteration running, set by the caller between
  // iterations) must outlive the stage; null = no drift.
  const std::atomic<int>* iteration = nullptr;
  int w_slowdown_after = 0;
  double w_slowdown_factor = 1;
};

// InvalidArgument on negative sizes or times, or a bad stage index.
absl::StatusOr<std::unique_ptr<Stage>> MakeSyntheticStage(const SyntheticStageConfig& config,
                                                          const StageOptions& options);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_SYNTHETIC_H_
