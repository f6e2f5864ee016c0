// SplitBackward: the zero-bubble B/W split of one stage's backward, done on the autograd graph
// of a model we cannot rewrite (TorchScript nn.Sequential blocks, torch::nn modules). The
// built-in GPT splits by construction (gpt.h); this is the generic path.
//
// Mechanism. Make() walks the graph behind `output` once, after the microbatch's forward:
//   - the input closure: the autograd nodes from which the stage input's gradient edge can be
//     reached (the nodes that depend on the input; B runs exactly these);
//   - for each parameter, its intermediates: walking from its AccumulateGrad node towards the
//     output, the first nodes met that are in the input closure. A parameter's gradient flows
//     through its intermediates and otherwise only through nodes that do not depend on the input;
//   - groups: parameters that share an intermediate (weight and bias of one linear, a tied
//     weight used twice) form one group; W runs one engine pass per group.
// B (RunInput) puts a pre-hook on every intermediate that records the gradients arriving at it
// (all of its input slots), runs the engine from the output with the input's gradient edge as
// the only requested output (keep_graph, no accumulation), so only the input gradient is
// computed, and removes the hooks. It then frees the saved tensors of the closure nodes that W
// does not run again. W (RunWeight) re-roots the engine, group by group (latest group first, so
// gradients land progressively), at the intermediates with their recorded gradients, asking only
// for the group's parameters' gradient edges. For that pass the intermediates' edges into the
// input closure are cut (restored afterwards), so no gradient flows back into nodes B already
// ran: an intermediate reachable from another one (a weight used in two consecutive layers) is
// fed only its recorded gradient, never a second copy.
//
// Stages without an input gradient (stage 0: integer tokens; or an output that does not depend
// on the input) have no closure: B computes nothing and keeps `grad_output`, W runs the whole
// backward to the parameters in one pass.
//
// Fallback (split() == false): when re-rooting cannot be trusted, B computes the input and all
// parameter gradients in one pass and W does nothing; the parameters are then B-phase. That is
// the case when the graph holds a JIT DifferentiableGraphBackward (TorchScript with the graph
// executor's optimisations on; run scripted modules under torch::jit::setGraphExecutorOptimize(
// false) to get a per-op graph), when an intermediate is a custom autograd function (CppNode,
// PyNode) that may not survive a second run, already carries hooks (they would fire twice), or
// is the input's own grad_fn. fallback_reason() says which. Gradients are the same either way.
//
// Gradients. Every gradient SplitBackward computes for a parameter is accumulated into its
// .grad in place: an existing .grad tensor is never replaced (it may be a view into a flat
// bucket buffer); an undefined .grad is created with the parameter's layout. A parameter that
// receives no gradient (unused) keeps its .grad as it is, as with a plain backward(). The input
// never gets a .grad: its gradient is returned.
//
// Landed notifications: `landed(k)` (k indexes `params`) is called exactly once per parameter
// per microbatch, right after that parameter's accumulation (or, for a parameter that received
// nothing, when its group is done): inside RunWeight when split(), inside RunInput otherwise.
// Unused parameters land first, then the groups, latest first.
//
// Ownership: Make takes over the graph behind `output`: do not run another backward through it.
// After RunInput the closure's saved tensors are freed (a second backward fails loudly); after
// RunWeight everything is released. `grad_output` is not copied: the caller must not modify it
// in place before RunWeight returns. Errors: InvalidArgument for bad arguments (naming the
// argument), FailedPrecondition for calls out of order, Internal for LibTorch errors.
//
// Thread-safety: one SplitBackward is driven by one thread at a time. Distinct instances over
// distinct graphs are independent; they may share parameters (microbatches of one stage) but
// must not run concurrently then, since they accumulate into the same .grad.
#ifndef ZPIPE_WORKER_MODEL_SPLIT_BACKWARD_H_
#define ZPIPE_WORKER_MODEL_SPLIT_BACKWARD_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zpipe::worker::model {

class SplitBackward {
 public:
  using Landed = std::function<void(int param)>;

  // After the forward of one microbatch. `output`: the stage output, or the scalar loss of the
  // last stage; it must be part of a graph (requires grad). `input`: the stage input, a leaf
  // requiring grad, or undefined / not requiring grad (stage 0's tokens). `params`: the stage's
  // parameters in forward order, leaves that require grad. InvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<SplitBackward>> Make(torch::Tensor output,
                                                             torch::Tensor input,
                                                             std::vector<torch::Tensor> params);
  ~SplitBackward();
  SplitBackward(const SplitBackward&) = delete;
  SplitBackward& operator=(const SplitBackward&) = delete;

  // Whether B and W are split; false: the fallback, B delivers every gradient.
  bool split() const;
  // Why the split was not possible (empty when split()).
  const std::string& fallback_reason() const;
  // Engine passes RunWeight makes, or made (0 in the fallback), for tests and diagnostics.
  int num_weight_passes() const;

  // B. `grad_output`: shaped like the output; undefined means 1 for a scalar output. Returns the
  // input gradient (detached), or an undefined tensor for an input without grad; zeros if the
  // output does not depend on the input. Parameter .grad is untouched when split(). Call once.
  absl::StatusOr<torch::Tensor> RunInput(const torch::Tensor& grad_output,
                                         const Landed& landed = {});

  // W: accumulates every parameter gradient, calling `landed` as each lands (see the file
  // comment). Call once, after a successful RunInput; a no-op (no calls) when !split().
  absl::Status RunWeight(const Landed& landed = {});

 private:
  struct Impl;
  explicit SplitBackward(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_SPLIT_BACKWARD_H_
