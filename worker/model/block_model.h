// BlockModel: a user's model as a chain of blocks, cut into pipeline stages of contiguous blocks.
//
// Two kinds exist: a TorchScript nn.Sequential file (torchscript.h) and an nn.Module built by a
// Python factory in an embedded interpreter (worker/python/python_model.h). Both obey one block
// contract, checked by Probe() with a dry forward of one microbatch (errors name the model and
// the block):
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
// A kind supplies the blocks (RunBlock, parameters and buffers by block, train/eval, device);
// everything else, the probe and the stage (MakeBlockStage), is shared, so both kinds train,
// split B/W, evaluate, checkpoint and profile the same way.
//
// Stage backward: B/W are split on the autograd graph (split_backward.h). Stages whose graph has
// no split run their whole backward in B (every parameter is then B-phase, W is empty) and say
// so through FusedBackward(); gradients are exact either way. With several tensors needing a
// gradient at a cut, B starts from one scalar root (boundary.h MakeGradRoot) and the stage's
// input is one flat leaf whose gradient is the gradient wire.
//
// Thread-safety: a model is shared by this worker's stages, which one executor thread drives;
// RunBlock and the block accessors are not called concurrently.
#ifndef ZPIPE_WORKER_MODEL_BLOCK_MODEL_H_
#define ZPIPE_WORKER_MODEL_BLOCK_MODEL_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/boundary.h"
#include "worker/model/stage.h"

namespace zpipe::worker::model {

class BlockModel {
 public:
  virtual ~BlockModel() = default;

  // What errors call the model: the TorchScript file, or the Python file.
  const std::string& path() const { return path_; }
  int num_blocks() const { return static_cast<int>(names_.size()); }
  const std::string& block_name(int k) const { return names_[k]; }
  int vocab() const { return vocab_; }  // V, from the probe's logits (0 without a probe)
  int seq_len() const { return seq_len_; }
  // The tensors entering block k (k >= 1; k = num_blocks: the last block's output) for a
  // microbatch of `microbatch_size` samples. Needs a probe.
  BoundarySpec Boundary(int k, int microbatch_size) const;
  // Parameter elements of block k.
  int64_t block_numel(int k) const;

  // Block k's parameters with their global names: the keys of the whole model's state_dict
  // ("3.attn.qkv.weight" for a Sequential's block 3), so trained weights map back onto it.
  virtual std::vector<std::pair<std::string, torch::Tensor>> BlockParameters(int k) = 0;
  virtual std::vector<torch::Tensor> BlockBuffers(int k) = 0;
  // Runs block k on `args` (its positional arguments) under the caller's grad mode; its output
  // as a list: one tensor, or the elements of the tuple it returned. InvalidArgument naming the
  // block for anything else; the model's own errors as a status or as an exception (c10::Error,
  // std::exception), which callers convert.
  virtual absl::StatusOr<std::vector<torch::Tensor>> RunBlock(
      int k, const std::vector<torch::Tensor>& args) = 0;
  // Whether block k takes `n` positional tensors, when the kind can tell before running it (an
  // InvalidArgument naming both blocks otherwise). Default: OK, the call itself will say.
  virtual absl::Status CheckArity(int /*k*/, size_t /*n*/) { return absl::OkStatus(); }
  virtual void SetBlockTraining(int k, bool training) = 0;
  // Moves block k's parameters and buffers to `device` (a CUDA stage's blocks).
  virtual void MoveBlock(int k, torch::Device device) = 0;

 protected:
  // `path`: see path(); `names`: the blocks' names, in order.
  BlockModel(std::string path, std::vector<std::string> names);

  // Refuses a tensor that is a parameter of two blocks (or twice of one): each stage trains its
  // blocks' parameters, so a tied weight would be trained as separate copies.
  absl::Status CheckNoSharedParameters();
  // The dry forward of zeros of [microbatch_size, seq_len] token ids through every block,
  // recording the boundaries and V (see the file comment). Blocks are left in training mode.
  // InvalidArgument naming the model and the block on any contract violation.
  absl::Status Probe(int seq_len, int microbatch_size);
  // "model PATH: why".
  absl::Status BadModel(absl::string_view why) const;

 private:
  struct Probed {
    BoundaryTensor tensor;  // at the probe's microbatch size
    bool batched = true;    // the first dimension is the batch
  };
  // [k]: the tensors entering block k; [num_blocks]: the last block's output.
  using Trace = std::vector<std::vector<torch::Tensor>>;
  absl::StatusOr<Trace> DryForward(int batch, int seq_len);
  absl::Status RecordBoundaries(const Trace& probe, const Trace& other, int microbatch_size);

  std::string path_;
  std::vector<std::string> names_;
  std::vector<std::vector<Probed>> boundaries_;  // [k] = inputs of block k
  int vocab_ = 0;
  int seq_len_ = 0;
};

// "block 3 ('3')".
std::string BlockLabel(int k, const std::string& name);

// Stage boundaries: first block of each stage s in [0, num_stages) plus num_blocks at the end.
// `cuts` (job spec model.<kind>.cuts, `field` in errors): where stages 1..S-1 begin; empty = as
// even as possible by block count. InvalidArgument naming the field.
absl::StatusOr<std::vector<int>> StageBoundaries(const std::vector<int>& cuts, int num_blocks,
                                                 int num_stages,
                                                 absl::string_view field = "model.torchscript");

// Stage `options.stage` holds blocks [begin, end) of `model` (shared by this worker's stages).
// The stage's split is probed on a zero microbatch (FusedBackward tells the outcome).
absl::StatusOr<std::unique_ptr<Stage>> MakeBlockStage(std::shared_ptr<BlockModel> model, int begin,
                                                      int end, const StageOptions& options);

// Whether a block stage runs its backward fused in B (no split found). False for others.
bool FusedBackward(const Stage& stage);

// V of the block model behind any of `stages`; 0 when none is a block stage.
int64_t BlockModelVocab(const std::vector<std::unique_ptr<Stage>>& stages);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_BLOCK_MODEL_H_
