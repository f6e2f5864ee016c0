// The interface between the worker and libzpipe_python.so, the plugin that embeds CPython.
//
// Why a plugin: the embedded interpreter needs libpython and torch's libtorch_python, which live
// in the venv's Python installation, not beside the worker's LibTorch. Linked into zpipe-worker,
// they would make every worker (an installed one, a container's) need that Python just to start.
// The worker instead loads the plugin with dlopen the first time a job has a Python model
// (python_model.cc), so only Python jobs need it, and a worker without it refuses them saying
// why.
//
// The interface is header-only and abstract, so neither side links the other's code: the plugin
// holds the interpreter and the Python objects (interpreter.h, python_blocks.cc), the worker the
// BlockModel around them (python_model.h). What crosses are LibTorch tensors, absl statuses and
// standard types, from the same shared libraries on both sides.
#ifndef ZPIPE_WORKER_PYTHON_PYTHON_PLUGIN_H_
#define ZPIPE_WORKER_PYTHON_PYTHON_PLUGIN_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/python/compile_mode.h"

namespace zpipe::worker::python {

struct PythonModelSource {
  std::string file;                     // the .py file
  std::string factory = "build_model";  // a function of the file returning the nn.Module
  std::string args_json;                // a JSON object: the factory's keyword arguments
  uint64_t seed = 0;                    // torch.manual_seed before the factory runs
  CompileMode compile = CompileMode::kNone;  // how blocks run (PythonBlocks::PrepareCompile)
};

// The blocks of one loaded Python model. Every method takes the GIL for its own duration only.
// Block errors come back as statuses (a Python exception: Internal with "Python raised:" and
// the traceback's last frames; a result that is not tensors: InvalidArgument), never as C++
// exceptions.
class PythonBlocks {
 public:
  virtual ~PythonBlocks() = default;
  virtual std::vector<std::string> Names() = 0;
  // (state_dict key in the whole module, tensor) of block k's parameters.
  virtual std::vector<std::pair<std::string, torch::Tensor>> Parameters(int k) = 0;
  virtual std::vector<torch::Tensor> Buffers(int k) = 0;
  // block_k(*args): the same tensors cross, no copies; one tensor or a tuple's back. With a
  // compile mode, once PrepareCompile succeeded: block k's compiled module for its current mode
  // (SetTraining) runs in C++ without the GIL, compiled on the block's first run after the load
  // or after Move (on its device); a failed compile is that run's error, InvalidArgument saying
  // what differs and what to do.
  virtual absl::StatusOr<std::vector<torch::Tensor>> Run(
      int k, const std::vector<torch::Tensor>& args) = 0;
  // With source.compile other than kNone, after the probe: the example microbatches every block
  // is compiled and checked on (glue.py Model.prepare_compile), token ids of [batch, seq_len]
  // below `vocab`. Blocks run eagerly until then. OK and no effect with kNone.
  virtual absl::Status PrepareCompile(int seq_len, int microbatch_size, int vocab) = 0;
  virtual void SetTraining(int k, bool training) = 0;
  virtual void Move(int k, const torch::Device& device) = 0;
};

class PythonPlugin {
 public:
  virtual ~PythonPlugin() = default;
  // Starts the interpreter on first use, runs `source.file` as a module and the factory on the
  // seeded torch; the model's blocks. InvalidArgument for a broken contract (no such factory,
  // no blocks), Internal with the traceback for an exception, FailedPrecondition when the
  // interpreter cannot start.
  virtual absl::StatusOr<std::unique_ptr<PythonBlocks>> Load(const PythonModelSource& source) = 0;
  // Where lines of the model's sys.stdout / sys.stderr go (nullptr: the process's stderr).
  virtual void SetOutput(std::function<void(std::string_view line)> sink) = 0;
};

// The plugin's one exported symbol: extern "C" PythonPlugin* zpipe_python_plugin_v2(), the
// process-wide plugin (never freed). The version changes with the interface above, so a worker
// refuses an older plugin (ZPIPE_PYTHON_PLUGIN) by name instead of calling into a wrong vtable.
inline constexpr char kPluginEntry[] = "zpipe_python_plugin_v2";
using PluginEntry = PythonPlugin* (*)();

}  // namespace zpipe::worker::python

#endif  // ZPIPE_WORKER_PYTHON_PYTHON_PLUGIN_H_
