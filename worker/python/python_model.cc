#include "worker/python/python_model.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::python {
namespace {

namespace fs = std::filesystem;

class PythonModel final : public model::BlockModel {
 public:
  PythonModel(std::string path, std::unique_ptr<PythonBlocks> blocks)
      : BlockModel(std::move(path), blocks->Names()), blocks_(std::move(blocks)) {}

  // The checks a TorchScript model passes at load: no shared parameters, the probe (eager, so
  // that its errors are the model's own); then the example microbatches of compiled blocks.
  absl::Status Check(int seq_len, int microbatch_size) {
    if (absl::Status st = CheckNoSharedParameters(); !st.ok()) return st;
    if (absl::Status st = Probe(seq_len, microbatch_size); !st.ok()) return st;
    if (seq_len == 0) return absl::OkStatus();  // no probe, no vocabulary: blocks stay eager
    return blocks_->PrepareCompile(seq_len, microbatch_size, vocab());
  }

  std::vector<std::pair<std::string, torch::Tensor>> BlockParameters(int k) override {
    return blocks_->Parameters(k);
  }
  std::vector<torch::Tensor> BlockBuffers(int k) override { return blocks_->Buffers(k); }
  absl::StatusOr<std::vector<torch::Tensor>> RunBlock(
      int k, const std::vector<torch::Tensor>& args) override {
    return blocks_->Run(k, args);
  }
  void SetBlockTraining(int k, bool training) override { blocks_->SetTraining(k, training); }
  void MoveBlock(int k, torch::Device device) override { blocks_->Move(k, device); }

 private:
  std::unique_ptr<PythonBlocks> blocks_;
};

// dlopen's RTLD_GLOBAL matters: the plugin brings libpython, and the extension modules Python
// imports later (torch._C, numpy) look their Py* symbols up in the global scope.
absl::StatusOr<PythonPlugin*> OpenPlugin() {
  const std::string path = PythonPluginPath();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "Python models: this worker cannot load its Python plugin ", path, " (",
        why != nullptr ? why : "?",
        "); it needs the venv's Python (libpython) and torch (libtorch_python) it was built "
        "with, or set ZPIPE_PYTHON_PLUGIN to a libzpipe_python.so built for this worker"));
  }
  auto entry = reinterpret_cast<PluginEntry>(dlsym(handle, kPluginEntry));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Python models: ", path, " is not a ZeroPipe Python plugin (no ", kPluginEntry, ")"));
  }
  return entry();
}

// Loaded once per process, on the first Python model; never unloaded (Python cannot be).
absl::StatusOr<PythonPlugin*> Plugin() {
  static const absl::StatusOr<PythonPlugin*>* plugin =
      new absl::StatusOr<PythonPlugin*>(OpenPlugin());
  return *plugin;
}

}  // namespace

std::string PythonPluginPath() {
  if (const char* env = std::getenv("ZPIPE_PYTHON_PLUGIN"); env != nullptr && *env != '\0') {
    return env;
  }
  // An installed worker: bin/zpipe-worker and lib/zeropipe/ (cmake/install.cmake).
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        exe.parent_path().parent_path() / "lib" / "zeropipe" / "libzpipe_python.so";
    if (fs::exists(installed, ec)) return installed.string();
  }
  return ZPIPE_PYTHON_PLUGIN_BUILT;
}

absl::StatusOr<std::shared_ptr<model::BlockModel>> LoadPythonModel(const PythonModelSource& source,
                                                                   int seq_len,
                                                                   int microbatch_size) {
  std::error_code ec;
  if (!fs::is_regular_file(source.file, ec)) {
    return absl::NotFoundError(absl::StrCat("model ", source.file, ": no such file"));
  }
  if (seq_len < 0 || microbatch_size < 1) {
    return absl::InvalidArgumentError("model: seq_len must be >= 0, microbatch_size >= 1");
  }
  absl::StatusOr<PythonPlugin*> plugin = Plugin();
  if (!plugin.ok()) return plugin.status();
  absl::StatusOr<std::unique_ptr<PythonBlocks>> blocks = (*plugin)->Load(source);
  if (!blocks.ok()) return blocks.status();
  auto model = std::make_shared<PythonModel>(source.file, *std::move(blocks));
  if (absl::Status st = model->Check(seq_len, microbatch_size); !st.ok()) return st;
  return model;
}

void SetPythonOutput(std::function<void(std::string_view line)> sink) {
  absl::StatusOr<PythonPlugin*> plugin = Plugin();
  if (plugin.ok()) (*plugin)->SetOutput(std::move(sink));
}

}  // namespace zpipe::worker::python
