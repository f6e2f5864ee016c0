// Stage: one pipeline stage of a model, as the plan executor drives it.
//
// A model is cut into S = p * v stages; stage s is a contiguous slice of it and owns its
// parameters and its WeightGradStore. The executor calls, per plan action:
//   F(s,i)  Forward(i, input, targets)  keeps what B needs, returns the output to send on.
//   B(s,i)  BackwardInput(i, grad)      returns ONLY the input gradient (sent upstream); frees
//                                       what only B needed; queues weight-gradient work for W.
//   W(s,i)  BackwardWeight(i)           runs exactly microbatch i's queued work; accumulates
//                                       into parameter .grad in place.
//   BW(s,i) BackwardFull(i, grad)       B then W at once.
//   R(s,i)  Recompute(i)                the forward again, for a microbatch whose F ran as
//                                       ForwardAndForget (the plan has an R for it).
// Order per microbatch: F, then B (after F), then W (after B); B and W of different microbatches
// may interleave freely. Violations return FailedPrecondition naming the stage and microbatch;
// LibTorch exceptions are caught here and returned as Internal/InvalidArgument statuses.
//
// Gradient accounting (for exactly-once gradient sync): params() lists every parameter with the
// phase its gradient arrives in (B or W; BW delivers both) and how many accumulations into its
// .grad one microbatch causes. A bucket's contributions per iteration are m x the sum over its
// parameters. Gradients are accumulated in place into existing .grad tensors (autograd does the
// same for B-phase parameters), so .grad may be a view into a flat bucket buffer; ZeroGrad keeps
// that storage.
//
// Tensors: a stage copies what it keeps (inputs, token ids, targets, output gradients), so the
// caller may reuse or overwrite its buffers as soon as a call returns; returned tensors belong to
// the caller (detached, no graph) and the stage never reads them again.
//
// Gradient-landed notifications: with an observer set (SetGradObserver), a stage calls it once per
// accumulation into parameter k's .grad, right after it happened: for a W-phase parameter inside
// W as each layer's weight gradient lands (later layers first), for a B-phase parameter at the end
// of B. Per microbatch that is exactly accumulations_per_microbatch calls per parameter, the
// same count Accumulations() gives per action, only earlier; gradient sync launches a bucket's
// all-reduce on the last one, mid-W, so the reduce of all but the last-landing bucket overlaps
// the W still running. The observer runs on the thread driving the stage.
//
// Thread-safety: a Stage is driven by one thread at a time (the executor). Distinct stages are
// independent (no global state) and may run on different threads.
#ifndef ZPIPE_WORKER_MODEL_STAGE_H_
#define ZPIPE_WORKER_MODEL_STAGE_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/plan.h"
#include "worker/model/param_info.h"

namespace zpipe::worker::model {

// Shape and dtype of a tensor crossing a stage boundary (for pre-posted receives).
struct TensorSpec {
  std::vector<int64_t> shape;
  torch::Dtype dtype = torch::kFloat32;
};

// Construction parameters shared by every stage kind.
struct StageOptions {
  int stage = 0;             // s, 0-based
  int num_stages = 1;        // S = p * v
  int num_microbatches = 1;  // m: the last stage's loss gradient is 1/m
  uint64_t seed = 0;         // job seed; parameters depend only on (seed, global layer, param name)
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;
};

// The seed F(s, i) of `iteration` on data rank `data_rank` gives its stage's generators when the
// job fixes them (ExecutorConfig::forward_seed): a function of the job seed and those four
// numbers only, so a stage draws the same dropout masks for a microbatch whatever the schedule,
// the order its actions run in, or a restart (distinct data ranks and microbatches draw
// independently).
uint64_t ForwardSeed(uint64_t job_seed, int iteration, int data_rank, int stage, int mb);

class Stage {
 public:
  virtual ~Stage() = default;

  virtual int stage() const = 0;
  virtual int num_stages() const = 0;
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == num_stages() - 1; }

  // F(s,i). `input`: token ids [b, T] (int64) for the first stage (synthetic: ignored, may be
  // undefined), else the previous stage's output. `targets`: last stage only, token ids
  // [b, T]. Returns the output activation (detached; send it on), or for the last stage the
  // microbatch's mean loss as a detached scalar. FailedPrecondition if F(i) already ran and B(i)
  // has not; InvalidArgument on bad shapes.
  virtual absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                                const torch::Tensor* targets = nullptr) = 0;

  // B(s,i). `grad_output`: gradient of this stage's output (OutputGradSpec); for the last stage
  // pass an undefined tensor to start from loss / m (or a scalar to use as dLoss). Returns the
  // input gradient (InputGradSpec), or an undefined tensor for the first stage.
  // FailedPrecondition if F(i) did not run or B(i) already ran.
  virtual absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad_output) = 0;

  // W(s,i). FailedPrecondition naming stage and microbatch if B(i) did not run or W(i) already
  // did.
  virtual absl::Status BackwardWeight(int mb) = 0;

  // BW(s,i): BackwardInput then BackwardWeight.
  absl::StatusOr<torch::Tensor> BackwardFull(int mb, const torch::Tensor& grad_output) {
    absl::StatusOr<torch::Tensor> grad_input = BackwardInput(mb, grad_output);
    if (!grad_input.ok()) return grad_input;
    if (absl::Status st = BackwardWeight(mb); !st.ok()) return st;
    return grad_input;
  }

  // Recomputation (core/recompute.h): the plan recomputes microbatch `mb` of this stage.
  // ForwardAndForget is its F: Forward, then the graph is dropped (FreeMicrobatch) and only
  // copies of `input` and `targets` are kept, with the state the random generators (the CPU's
  // and the parameters' device's) had when Forward started. Recompute is its R: Forward again on
  // what was kept, from that generator state, after which the generators are put back where they
  // were; so dropout draws the same masks, the rest of the run draws what it would have drawn
  // without recomputation, and B and W find exactly what an ordinary F would have left (bit for
  // bit on the CPU: the same ops on the same values and parameters; the optimizer steps only
  // after the iteration's actions). Recompute's output is dropped: F already handed it on.
  // FailedPrecondition for Recompute without ForwardAndForget, or twice.
  absl::StatusOr<torch::Tensor> ForwardAndForget(int mb, const torch::Tensor& input,
                                                 const torch::Tensor* targets = nullptr);
  absl::Status Recompute(int mb);
  // Seeds the generators a forward may draw from (the CPU's and the parameters' device's), so
  // the next Forward's dropout masks depend on `seed` alone (ForwardSeed), not on what drew
  // before it. Internal on a libtorch error.
  absl::Status SeedGenerators(uint64_t seed);
  // Microbatches whose input is kept for Recompute.
  int kept_for_recompute() const { return static_cast<int>(kept_.size()); }

  // The mean loss of microbatch `mb` (last stage, after its F). NotFound otherwise. Losses stay
  // until ClearLosses().
  virtual absl::StatusOr<float> Loss(int mb) const = 0;
  virtual void ClearLosses() = 0;

  // Drops everything held for `mb` (forward state, queued weight work, loss); for aborts.
  virtual void FreeMicrobatch(int mb) = 0;
  // Microbatches with forward state or queued weight work still held (0 after a full iteration).
  virtual int pending_microbatches() const = 0;

  // Parameters in model (forward) order, with gradient accounting.
  virtual const std::vector<ParamInfo>& params() const = 0;

  // `param`: index into params(). Called as each accumulation lands (see the file comment); an
  // empty function turns notifications off.
  using GradObserver = std::function<void(int param)>;
  void SetGradObserver(GradObserver observer) { grad_observer_ = std::move(observer); }
  // Whether this stage calls the observer (every StageBase does). Gradient sync counts a stage
  // that does not (a wrapper, a test double) per action instead, after the action ends.
  virtual bool reports_grad_landings() const { return false; }
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const ParamInfo& p : params()) out.push_back(p.tensor);
    return out;
  }
  // Sets every defined .grad to zero in place (keeps its storage).
  void ZeroGrad() {
    torch::NoGradGuard no_grad;
    for (const ParamInfo& p : params()) {
      if (p.tensor.grad().defined()) p.tensor.mutable_grad().zero_();
    }
  }

  // What crosses this stage's boundaries for a microbatch of `microbatch_size` samples, known
  // before any data flows (a model whose blocks change width has different specs per stage).
  // InputSpec: the activation Forward takes (for s > 0; the first stage's is its token ids).
  // OutputSpec: the activation Forward returns (s < S - 1). InputGradSpec: the gradient
  // BackwardInput returns; OutputGradSpec: the one it takes. Stage s's OutputSpec equals stage
  // s+1's InputSpec, and its OutputGradSpec stage s+1's InputGradSpec; the executor sizes every
  // receive from them and fails an action whose tensor does not match. Each is one tensor, the
  // wire form: a stage whose boundary carries several tensors (a TorchScript block returning a
  // tuple) packs them into one and sends back gradients only for those that need one
  // (boundary.h), so its gradient specs differ from its activation specs. Otherwise the
  // gradient is shaped like the activation (the defaults).
  virtual TensorSpec InputSpec(int microbatch_size) const = 0;
  virtual TensorSpec OutputSpec(int microbatch_size) const = 0;
  virtual TensorSpec InputGradSpec(int microbatch_size) const {
    return InputSpec(microbatch_size);
  }
  virtual TensorSpec OutputGradSpec(int microbatch_size) const {
    return OutputSpec(microbatch_size);
  }

  // Training (the default) or evaluation: dropout and the like behave as in PyTorch's
  // train()/eval(). Evaluation forwards keep no graph. Stages without mode-dependent layers
  // ignore it.
  virtual void SetTraining(bool training) { (void)training; }

 protected:
  void NotifyGradLanded(int param) const {
    if (grad_observer_) grad_observer_(param);
  }

 private:
  // What ForwardAndForget keeps for Recompute.
  struct Kept {
    torch::Tensor input;
    torch::Tensor targets;  // undefined unless the last stage got them
    std::vector<std::pair<at::Generator, torch::Tensor>> rng;  // generator, its state at F
  };
  GradObserver grad_observer_;
  std::map<int, Kept> kept_;
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_STAGE_H_
