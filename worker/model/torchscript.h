// A user's model as a TorchScript nn.Sequential: a BlockModel (block_model.h: the block contract,
// the probe, the stages) whose blocks are the scripted module's children, in order.
//
// The file (torch.jit.script + torch.jit.save in Python; python/zeropipe export_model) holds a
// module whose children are the blocks; TorchScriptModel::Load checks the contract with the
// probe (errors name the file and the block), and before it each block's forward schema (it
// takes tensors, returns one value) and, as the probe runs, whether a block takes as many
// positional tensors as the previous one returns.
//
// Parameters keep the file's values (the initial weights) and its names, prefixed with the
// block's name: "3.attn.qkv.weight" is the Sequential's state_dict key, so trained weights can be
// written back into the same structure (ExportTorchScript).
//
// The JIT's graph optimisations are turned off (torch::jit::setGraphExecutorOptimize(false)) when
// a model is loaded: fused differentiable graphs would hide the per-op graph the split needs, and
// the interpreter then computes what eager PyTorch does. The switch is the calling thread's own,
// not the process's: a model run on another thread than the one that loaded it gets the
// optimised graphs and a fused backward (W empty). The worker loads and runs a job's model on the
// job's thread, and a profile's on the profile's.
#ifndef ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_
#define ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_

#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/block_model.h"

namespace zpipe::worker::model {

class TorchScriptModel final : public BlockModel {
 public:
  // Loads `path` and probes it with zeros of [microbatch_size, seq_len] token ids.
  // NotFound / InvalidArgument naming the file (and the block) on any contract violation.
  // seq_len == 0: no probe (for exporting): Boundary and vocab are then unknown.
  static absl::StatusOr<std::shared_ptr<TorchScriptModel>> Load(const std::string& path,
                                                                int seq_len, int microbatch_size);

  torch::jit::Module& block(int k) { return blocks_[k]; }
  torch::jit::Module& module() { return module_; }

  std::vector<std::pair<std::string, torch::Tensor>> BlockParameters(int k) override;
  std::vector<torch::Tensor> BlockBuffers(int k) override;
  absl::StatusOr<std::vector<torch::Tensor>> RunBlock(
      int k, const std::vector<torch::Tensor>& args) override;
  absl::Status CheckArity(int k, size_t n) override;
  void SetBlockTraining(int k, bool training) override { blocks_[k].train(training); }
  void MoveBlock(int k, torch::Device device) override { blocks_[k].to(device); }

 private:
  TorchScriptModel(std::string path, torch::jit::Module module,
                   std::vector<std::string> names, std::vector<torch::jit::Module> blocks);

  torch::jit::Module module_;
  std::vector<torch::jit::Module> blocks_;
};

// Writes `model`'s module to `out` with every parameter named in `values` (state_dict keys)
// replaced by that value: the user's structure with trained weights, loadable with
// torch.jit.load. InvalidArgument naming a parameter that is missing or has another shape.
absl::Status ExportTorchScript(TorchScriptModel& model,
                               const std::vector<std::pair<std::string, torch::Tensor>>& values,
                               const std::string& out);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_TORCHSCRIPT_H_
