#include "worker/daemon/model_export.h"

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

// A state dict (name -> tensor) in torch.save's format: torch.load(FILE) in Python.
absl::Status WriteStateDict(const NamedTensors& params, const fs::path& out) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : params) dict.insert(name, t);
  std::vector<char> bytes;
  try {
    bytes = torch::pickle_save(c10::IValue(dict));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
  }
  return WriteFileAtomically(out, absl::string_view(bytes.data(), bytes.size()));
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
  if (model.is_object() && model.contains("gpt")) {
    if (absl::Status st = WriteStateDict(*params, out); !st.ok()) return st;
    result.kind = "gpt-state-dict";
    return result;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("export: the checkpoint under '", checkpoint_root.string(),
                   "' is of a synthetic model, which has no weights to export"));
}

}  // namespace zpipe::worker
