// A user's model: a TorchScript nn.Sequential, cut into pipeline stages of contiguous blocks.
//
// The file (torch.jit.script + torch.jit.save in Python; python/zeropipe export_model) holds a
// module whose children, in order, are the blocks. Contract, checked by TorchScriptModel::Load
// with a probe forward of one microbatch (errors name the file and the block):
//   block 0 takes int64 token ids [b, L]; every block returns one tensor or a tuple of tensors,
//   and the next block takes them as its positional arguments (hidden state, attention mask,
//   position ids, a rotary cache...); the last block returns logits [b, L, V], or (logits, aux)
//   with aux a floating scalar. The loss is the mean cross-entropy over every token, plus aux
//   when the last block returns one (an auxiliary loss: a MoE balance term carried along the
//   tuple). A tensor crossing a cut alone must keep the batch as its first dimension; one of a
//   tuple either does or has a shape that does not depend on the batch (a rotary cache [L, d],
//   a scalar), found by probing a second batch size.
// The probe (in eval mode: no running-statistics update, no dropout draw) also records every
// boundary's tensors (shape, dtype, and whether each needs a gradient: a floating tensor that is
// part of the autograd graph; integer and boolean tensors, and floating ones computed from
// buffers or detached, cross forward only), so blocks may change width and a stage's
// InputSpec/OutputSpec are the wire forms of the boundaries before its first block and after its
// last (boundary.h: what the executor sizes receives from and checks sends against); and V
// (token ids >= V in the data are an error). Training forwards run the stage's blocks in train(),
// forwards after SetTraining(false) in eval() without a graph.
//
// Parameters keep the file's values (the initial weights) and its names, prefixed with the
// block's name: "3.attn.qkv.weight" is the Sequential's state_dict key, so trained weights can be
// written back into the same structure (ExportTorchScript).
//
// Backward: B/W are split on the autograd graph (split_backward.h). Stages whose graph has no
// split run their whole backward in B (every parameter is then B-phase, W is empty) and say so
// through fused_backward(); gradients are exact either way. With several tensors needing a
// gradient at a cut, B starts from one scalar root (boundary.h MakeGradRoot) and the stage's
// input is one flat leaf whose gradient is the gradient wire.
//
// The JIT's graph optimisations are turned off process-wide (torch::jit::setGraphExecutorOptimize
// (false)) when a model is loaded: fused differentiable graphs would hide the per-op graph the
// split needs, and the interpreter then computes what eager PyTorch does.
#ifndef ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_
#define ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_

#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/boundary.h"
#include "worker/model/stage.h"

namespace zpipe::worker::model {

class TorchScriptModel {
 public:
  // Loads `path` and probes it with zeros of [microbatch_size, seq_len] token ids.
  // NotFound / InvalidArgument naming the file (and the block) on any contract violation.
  // seq_len == 0: no probe (for exporting): Boundary and vocab are then unknown.
  static absl::StatusOr<std::shared_ptr<TorchScriptModel>> Load(const std::string& path,
                                                                int seq_len, int microbatch_size);

  const std::string& path() const { return path_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  const std::string& block_name(int k) const { return names_[k]; }
  torch::jit::Module& block(int k) { return blocks_[k]; }
  int vocab() const { return vocab_; }  // V, from the probe's logits
  int seq_len() const { return seq_len_; }
  // The tensors entering block k (k >= 1; k = num_blocks: the last block's output) for a
  // microbatch of `microbatch_size` samples.
  BoundarySpec Boundary(int k, int microbatch_size) const;
  // Parameter elements of block k.
  int64_t block_numel(int k) const { return numel_[k]; }
  torch::jit::Module& module() { return module_; }

 private:
  std::string path_;
  torch::jit::Module module_;
  std::vector<torch::jit::Module> blocks_;
  std::vector<std::string> names_;
  struct Probed {
    BoundaryTensor tensor;  // at the probe's microbatch size
    bool batched = true;    // the first dimension is the batch
  };
  std::vector<std::vector<Probed>> boundaries_;  // [k] = inputs of block k
  std::vector<int64_t> numel_;
  int vocab_ = 0;
  int seq_len_ = 0;
};

// Stage boundaries: first block of each stage s in [0, num_stages) plus num_blocks at the end.
// `cuts` (job spec model.torchscript.cuts): where stages 1..S-1 begin; empty = `balanced` if given
// (same form), else as even as possible by block count. InvalidArgument naming the field.
absl::StatusOr<std::vector<int>> StageBoundaries(const std::vector<int>& cuts, int num_blocks,
                                                 int num_stages);

// Stage `options.stage` holds blocks [begin, end) of `model` (shared by this worker's stages).
absl::StatusOr<std::unique_ptr<Stage>> MakeTorchScriptStage(std::shared_ptr<TorchScriptModel> model,
                                                            int begin, int end,
                                                            const StageOptions& options);

// Whether a TorchScript stage runs its backward fused in B (no split found). False for others.
bool FusedBackward(const Stage& stage);

// V of the TorchScript model behind any of `stages`; 0 when none is a TorchScript stage.
int64_t TorchScriptVocab(const std::vector<std::unique_ptr<Stage>>& stages);

// Writes `model`'s module to `out` with every parameter named in `values` (state_dict keys)
// replaced by that value: the user's structure with trained weights, loadable with
// torch.jit.load. InvalidArgument naming a parameter that is missing or has another shape.
absl::Status ExportTorchScript(TorchScriptModel& model,
                               const std::vector<std::pair<std::string, torch::Tensor>>& values,
                               const std::string& out);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_
