#include "worker/daemon/block_model_source.h"

#include <string>
#include <string_view>
#include <variant>

#include "absl/strings/str_cat.h"
#include "util/log.h"
#include "worker/model/torchscript.h"
#if ZPIPE_WITH_PYTHON
#include "worker/python/python_model.h"
#endif

namespace zpipe::worker {

const std::vector<int>* BlockModelCuts(const ModelSource& source) {
  if (const auto* ts = std::get_if<TorchScriptSource>(&source)) return &ts->cuts;
  if (const auto* py = std::get_if<PythonSource>(&source)) return &py->cuts;
  return nullptr;
}

absl::string_view BlockModelField(const ModelSource& source) {
  return std::holds_alternative<PythonSource>(source) ? "model.python" : "model.torchscript";
}

const std::string& BlockModelFile(const ModelSource& source) {
  if (const auto* py = std::get_if<PythonSource>(&source)) return py->file;
  return std::get<TorchScriptSource>(source).path;
}

absl::StatusOr<std::shared_ptr<model::BlockModel>> LoadBlockModel(const ModelSource& source,
                                                                  uint64_t seed, int seq_len,
                                                                  int microbatch_size) {
  if (const auto* ts = std::get_if<TorchScriptSource>(&source)) {
    auto loaded = model::TorchScriptModel::Load(ts->path, seq_len, microbatch_size);
    if (!loaded.ok()) return loaded.status();
    return std::shared_ptr<model::BlockModel>(*std::move(loaded));
  }
  const auto* py = std::get_if<PythonSource>(&source);
  if (py == nullptr) {
    return absl::InvalidArgumentError("model: only torchscript and python models have blocks");
  }
#if ZPIPE_WITH_PYTHON
  // The model's print() and warnings, and the tracebacks of its errors, reach `zpipe logs`.
  python::SetPythonOutput([](std::string_view line) {
    Log(absl::StrCat("model: ", absl::string_view(line.data(), line.size())));
  });
  return python::LoadPythonModel(
      {.file = py->file,
       .factory = py->factory,
       .args_json = py->args_json,
       .seed = seed,
       .compile = py->compile},
      seq_len, microbatch_size);
#else
  (void)seed;
  return absl::FailedPreconditionError(
      "model.python: this worker was built without Python models (its build found no shared "
      "libpython for the venv's Python; see cmake/python_embed.cmake)");
#endif
}

}  // namespace zpipe::worker
