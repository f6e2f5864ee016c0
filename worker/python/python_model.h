// PythonModel: a model as people write it, an nn.Module built by a Python factory, run as a
// BlockModel (worker/model/block_model.h: the block contract, the probe, the stages, B/W split).
//
// The job names a file, a factory and its keyword arguments (job.proto PythonModel). Loading runs
// the file in the worker's embedded interpreter (the plugin, python_plugin.h) as a fresh module,
// seeds torch with the job's seed (torch.manual_seed), calls factory(**args) and takes the blocks
// of the nn.Module it returns: module.stages() when it has that method (a list of nn.Modules, in
// order), else the children of an nn.Sequential. Each block is called with the previous block's
// tensors as positional arguments; what it returns crosses to C++ as the same tensors (no copy),
// and the autograd graph its forward built is split into B and W in C++ like a TorchScript
// block's, so only forwards run Python and the GIL is held only inside them. A parameter's name
// is its key in the whole module's state_dict ("transformer.h.0.attn.c_attn.weight"), whatever
// the blocks are, so the exported state dict loads into the module the factory builds. One block
// may use a tensor twice (tied within it); two blocks may not share one (refused, naming both).
//
// Errors: a Python exception becomes a status, Internal with "Python raised:" and the traceback's
// last frames (the whole traceback goes to the output sink, the worker's log); a broken contract
// (no such factory, no blocks) InvalidArgument saying what to change. The worker never crashes
// on a model's error.
//
// Security: the file is code the worker runs with its own rights; the daemon checks it lies
// under the worker's data roots, and the coordinator accepts such jobs only with
// --allow-python-models or on loopback (docs/guide.md "Python models").
#ifndef ZPIPE_WORKER_PYTHON_PYTHON_MODEL_H_
#define ZPIPE_WORKER_PYTHON_PYTHON_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/model/block_model.h"
#include "worker/python/python_plugin.h"

namespace zpipe::worker::python {

// Builds and probes the model (BlockModel's probe) with zeros of [microbatch_size, seq_len] token
// ids; seq_len == 0: no probe. NotFound for a missing file; InvalidArgument or Internal naming
// the file (and the block, with the Python traceback) otherwise; FailedPrecondition when this
// worker cannot load the plugin or start Python (saying which file and what to do).
absl::StatusOr<std::shared_ptr<model::BlockModel>> LoadPythonModel(const PythonModelSource& source,
                                                                   int seq_len,
                                                                   int microbatch_size);

// Where the output of Python models (print, warnings, tracebacks) goes, one line per call, from
// the thread that printed; it must not call into Python. Loads the plugin; no effect where it
// cannot be loaded (Python models then fail saying why).
void SetPythonOutput(std::function<void(std::string_view line)> sink);

// The plugin this worker loads: $ZPIPE_PYTHON_PLUGIN, else lib/zeropipe/libzpipe_python.so
// beside the worker's bin/, else the one the build made.
std::string PythonPluginPath();

}  // namespace zpipe::worker::python

#endif  // ZPIPE_WORKER_PYTHON_PYTHON_MODEL_H_
