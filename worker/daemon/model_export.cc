#include "worker/daemon/model_export.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/daemon/job_checkpoint.h"
#include "worker/executor/checkpoint.h"
#include "worker/model/torchscript.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

absl::StatusOr<NamedTensors> ReadAllStages(const ResumePoint& point) {
  NamedTensors all;
  for (int s = 0; s < point.manifest.stages; ++s) {
    auto params = ReadStageParameters(point.dir / StageCheckpointFileName(s));
    if (!params.ok()) return params.status();
    for (auto& p : *params) all.push_back(std::move(p));
  }
  return all;
}

// A state dict (name -> tensor) in torch.save's format: torch.load(FILE) in Python. As
// torch::pickle_save writes it, except that the dict is not wrapped in TorchScript's type tag
// (torch.jit._pickle.restore_type_tag), which torch.load's default weights_only=True refuses:
// the file holds a plain dict of tensors and loads like any state dict.
absl::Status WriteStateDict(const NamedTensors& params, const fs::path& out) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : params) dict.insert(name, t);
  std::string bytes;
  try {
    std::vector<char> pickled;
    torch::jit::Pickler pickler(
        [&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(dict));
    pickler.stop();
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                       pickler.tensorData(), writer);
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
  }
  return WriteFileAtomically(out, bytes);
}

}  // namespace

absl::StatusOr<ExportResult> ExportTrainedModel(const fs::path& checkpoint_root,
                                                const std::string& model_path,
                                                const fs::path& out) {
  auto point = LatestCompleteCheckpoint(checkpoint_root);
  if (!point.ok()) return point.status();
  if (!point->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("export: no complete checkpoint under '", checkpoint_root.string(), "'"));
  }
  const ResumePoint& p = **point;
  const json model = json::parse(p.manifest.model_json, nullptr, false);
  auto params = ReadAllStages(p);
  if (!params.ok()) return params.status();
  ExportResult result;
  result.iteration = p.manifest.iteration;
  result.parameters = static_cast<int>(params->size());
  if (model.is_object() && model.contains("torchscript")) {
    std::string path = model_path;
    if (path.empty() && model["torchscript"].contains("path")) {
      path = model["torchscript"]["path"].get<std::string>();
    }
    auto loaded = model::TorchScriptModel::Load(path, /*seq_len=*/0, 1);  // no probe
    if (!loaded.ok()) return loaded.status();
    if (absl::Status st = model::ExportTorchScript(**loaded, *params, out.string()); !st.ok()) {
      return st;
    }
    result.kind = "torchscript";
    return result;
  }
  if (model.is_object() && (model.contains("gpt") || model.contains("python"))) {
    if (absl::Status st = WriteStateDict(*params, out); !st.ok()) return st;
    result.kind = model.contains("gpt") ? "gpt-state-dict" : "python-state-dict";
    return result;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("export: the checkpoint under '", checkpoint_root.string(),
                   "' is of a synthetic model, which has no weights to export"));
}

}  // namespace zpipe::worker
