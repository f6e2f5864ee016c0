// Boundary: what crosses one pipeline cut, and the form it travels in.
//
// A block may return a tuple of tensors (hidden state, attention mask, position ids, a rotary
// cache, an auxiliary loss); the next block takes them as its positional arguments. Each tensor
// crosses the cut with its own shape and dtype, found by the dry forward at job start. Only
// floating tensors that are part of the autograd graph (they depend on a parameter) get a
// gradient back; integer and boolean tensors, and floating ones computed from buffers or
// detached (a rotary cache), cross forward only.
//
// The executor moves one tensor per boundary and direction (one message per SEND/RECV action).
// A BoundarySpec maps the tuple onto that one tensor, the wire:
//   activation  one tensor travels as itself (no copy: the common case of a single hidden
//               state); several as one uint8 buffer holding each tensor's bytes in tuple order,
//               each at an offset aligned to 8 bytes.
//   gradient    the gradients of the tensors that need one, in tuple order: one such tensor's
//               gradient travels as itself; several as one flat tensor of their promoted dtype,
//               each flattened in turn. The receiving stage makes that flat tensor its input
//               leaf and the tensors needing grad views of it, so the input gradient autograd
//               computes IS the wire, with no packing.
// Both sides derive the wire from the same BoundarySpec, so the receiver sizes its buffer
// before any data flows.
//
// Errors: InvalidArgument naming `where` (the stage and microbatch), the tensor's index in the
// tuple and both shapes. Functions hold no state; thread-compatible.
#ifndef ZPIPE_WORKER_MODEL_BOUNDARY_H_
#define ZPIPE_WORKER_MODEL_BOUNDARY_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/stage.h"

namespace zpipe::worker::model {

struct BoundaryTensor {
  TensorSpec spec;
  bool needs_grad = false;  // floating and part of the graph: its gradient is sent back
};

// The tensors crossing one cut, in tuple order (one for a block that returns a single tensor).
struct BoundarySpec {
  std::vector<BoundaryTensor> tensors;

  bool tuple() const { return tensors.size() > 1; }
  int num_grads() const;
  // The activation's wire: tensors[0].spec when there is one tensor, else uint8 [bytes].
  TensorSpec ActivationWire() const;
  // The gradient's wire: the one tensor needing grad's spec, else [elements] of the promoted
  // dtype of those needing grad ([0] float32 when none does).
  TensorSpec GradientWire() const;
  // "([2, 16, 32] Float, [2, 16] Bool)".
  std::string ToString() const;
};

// Checks `tensors` against `spec` (count and every shape; dtypes are converted to the spec's,
// as under bf16 autocast) and returns the activation wire. A single tensor comes back as itself
// (converted if its dtype differs); several are copied into one new buffer.
absl::StatusOr<torch::Tensor> PackActivations(const BoundarySpec& spec,
                                              const std::vector<torch::Tensor>& tensors,
                                              absl::string_view where);

// The tensors of activation wire `wire`, as views into it (the caller copies what it keeps).
absl::StatusOr<std::vector<torch::Tensor>> UnpackActivations(const BoundarySpec& spec,
                                                             const torch::Tensor& wire,
                                                             absl::string_view where);

// Views of gradient wire `wire` (shaped like GradientWire()), one per tensor needing grad, in
// tuple order, each shaped like its tensor, in the wire's dtype. Used both ways: to split a
// received gradient, and to make a stage's inputs views of its flat input leaf.
absl::StatusOr<std::vector<torch::Tensor>> GradientViews(const BoundarySpec& spec,
                                                         const torch::Tensor& wire,
                                                         absl::string_view where);

// The tensors a stage's first block takes, from the unpacked activations `parts`: those needing
// grad become views of one new flat leaf requiring grad, `*leaf`, shaped like GradientWire()
// (its gradient is the gradient wire: nothing to pack in B); the others are copies, detached.
// All on `device`, in the spec's dtypes. For a single floating tensor that is one copy, the
// leaf itself. `*leaf` is undefined when no tensor needs grad.
absl::StatusOr<std::vector<torch::Tensor>> InputsFromActivations(
    const BoundarySpec& spec, const std::vector<torch::Tensor>& parts, torch::Device device,
    torch::Tensor* leaf, absl::string_view where);

// The graph root and gradient a stage's B starts from, given its `outputs` (the tensors of the
// boundary, in tuple order) and the received gradient wire. One tensor needing grad: that output
// and a copy of the wire (the caller may reuse its buffer). Several: the scalar sum over them of
// (output * its gradient).sum(), with an undefined gradient (1): its backward hands each output
// exactly its gradient (the products' gradient is the gradient times 1).
struct GradRoot {
  torch::Tensor root;
  torch::Tensor grad;
};
absl::StatusOr<GradRoot> MakeGradRoot(const BoundarySpec& spec,
                                      const std::vector<torch::Tensor>& outputs,
                                      const torch::Tensor& grad_wire, absl::string_view where);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_BOUNDARY_H_
