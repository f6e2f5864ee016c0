// Exporting a job's trained model from its checkpoints (`zpipe-worker export`, which `zpipe run
// --out` and `zpipe export` call).
//
// TorchScript jobs: the user's scripted module (model.torchscript.path), same structure, with
// every parameter replaced by the trained value from the latest complete checkpoint under
// DIR/NAME; loadable with torch.jit.load. Python jobs: a state dict (torch.load) of every trained
// parameter under its key in the module the factory builds (load_state_dict, strict=False when
// the module also has buffers); no Python runs to write it. Built-in GPT jobs: a LibTorch archive
// holding every parameter under its global name (e.g. "layers.3.mlp.fc1.weight"), readable in
// Python with torch.jit.load(FILE).state_dict()-style access to its attributes (see docs/guide.md).
// Synthetic jobs have no weights worth exporting.
#ifndef ZPIPE_WORKER_DAEMON_MODEL_EXPORT_H_
#define ZPIPE_WORKER_DAEMON_MODEL_EXPORT_H_

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace zpipe::worker {

struct ExportResult {
  int iteration = 0;  // K of the checkpoint exported
  std::string kind;   // "torchscript", "python-state-dict" or "gpt-state-dict"
  int parameters = 0;
};

// `checkpoint_root`: DIR/NAME of the job. `model_path`: overrides the model file recorded in the
// checkpoint's manifest (empty = use it). Errors name the path and the problem: no complete
// checkpoint, a parameter the model has and the checkpoint lacks (or another shape), an
// unwritable `out`.
absl::StatusOr<ExportResult> ExportTrainedModel(const std::filesystem::path& checkpoint_root,
                                                const std::string& model_path,
                                                const std::filesystem::path& out);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_MODEL_EXPORT_H_
