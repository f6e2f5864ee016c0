// The user's model a job names, model.torchscript or model.python, loaded as the BlockModel its
// stages are cut from (worker/model/block_model.h). The one place the daemon tells the two kinds
// apart: stages, profiling and checkpoint cuts then treat them alike.
#ifndef ZPIPE_WORKER_DAEMON_BLOCK_MODEL_SOURCE_H_
#define ZPIPE_WORKER_DAEMON_BLOCK_MODEL_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/daemon/job_config.h"
#include "worker/model/block_model.h"

namespace zpipe::worker {

// The cuts of a model made of blocks a worker loads and cuts (TorchScript or Python): empty =
// balanced by measured cost, or even. nullptr for GPT and synthetic models.
const std::vector<int>* BlockModelCuts(const ModelSource& source);

// The job-spec field the model's errors name: "model.torchscript" or "model.python".
absl::string_view BlockModelField(const ModelSource& source);

// The file the model comes from: model.torchscript.path or model.python.file. Needs a block
// model (BlockModelCuts non-null).
const std::string& BlockModelFile(const ModelSource& source);

// Loads and probes a block model with [microbatch_size, seq_len] token ids (seq_len 0: no
// probe). A Python model is built in this process's interpreter after torch.manual_seed(`seed`),
// its output (print, warnings, tracebacks) going to the worker's log and so to `zpipe logs`; a
// worker built without Python refuses it, FailedPrecondition saying so. InvalidArgument for a
// GPT or synthetic source.
absl::StatusOr<std::shared_ptr<model::BlockModel>> LoadBlockModel(const ModelSource& source,
                                                                  uint64_t seed, int seq_len,
                                                                  int microbatch_size);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_BLOCK_MODEL_SOURCE_H_
