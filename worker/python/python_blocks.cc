// The plugin side of Python models (python_plugin.h): a loaded model's blocks as Python objects,
// run in the embedded interpreter (interpreter.h), or compiled (model.python.compile) and run as
// TorchScript modules, and the plugin's entry point.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/module_python.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/python/interpreter.h"
#include "worker/python/python_plugin.h"

namespace zpipe::worker::python {
namespace {

namespace py = pybind11;

// "block 3 ('3')", as the worker's errors name blocks.
std::string Label(int k, const std::vector<std::string>& names) {
  return absl::StrCat("block ", k, " ('", names[k], "')");
}

// A block compiled for both modes (glue.py Model.compile): TorchScript modules sharing the block's
// parameters and buffers, run from C++ like a TorchScript model's blocks (torchscript.cc).
struct Compiled {
  torch::jit::Module training;
  torch::jit::Module eval;
};

class Blocks final : public PythonBlocks {
 public:
  // `loaded`: the glue's Model. Call with the GIL held.
  Blocks(const Interpreter& interpreter, py::object loaded, CompileMode compile)
      : interpreter_(interpreter),
        loaded_(loaded),
        names_(loaded.attr("names").cast<std::vector<std::string>>()),
        compile_(compile) {
    for (py::handle block : loaded.attr("blocks")) {
      blocks_.push_back(py::reinterpret_borrow<py::object>(block));
    }
    training_.assign(blocks_.size(), true);
    compiled_.resize(blocks_.size());
  }

  ~Blocks() override {
    ScopedGil gil;
    compiled_.clear();
    blocks_.clear();
    loaded_ = py::object();
  }

  std::vector<std::string> Names() override { return names_; }

  std::vector<std::pair<std::string, torch::Tensor>> Parameters(int k) override {
    ScopedGil gil;
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (py::handle item : loaded_.attr("parameters")(k)) {
      py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      out.emplace_back(pair[0].cast<std::string>(), THPVariable_Unpack(pair[1].ptr()));
    }
    return out;
  }

  std::vector<torch::Tensor> Buffers(int k) override {
    ScopedGil gil;
    std::vector<torch::Tensor> out;
    for (py::handle b : loaded_.attr("buffers")(k)) out.push_back(THPVariable_Unpack(b.ptr()));
    return out;
  }

  absl::StatusOr<std::vector<torch::Tensor>> Run(int k,
                                                 const std::vector<torch::Tensor>& args) override {
    if (prepared_) return RunCompiled(k, args);
    ScopedGil gil;
    // The same tensors, as Python objects (THPVariable_Wrap: no copy; a new reference each).
    py::tuple py_args(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* t = THPVariable_Wrap(args[i]);
      if (t == nullptr) return Raised(k);
      PyTuple_SET_ITEM(py_args.ptr(), static_cast<Py_ssize_t>(i), t);
    }
    py::object out =
        py::reinterpret_steal<py::object>(PyObject_Call(blocks_[k].ptr(), py_args.ptr(), nullptr));
    if (!out) return Raised(k);
    return Tensors(k, out);
  }

  absl::Status PrepareCompile(int seq_len, int microbatch_size, int vocab) override {
    if (compile_ == CompileMode::kNone) return absl::OkStatus();
    ScopedGil gil;
    py::object done = py::reinterpret_steal<py::object>(PyObject_CallMethod(
        loaded_.ptr(), "prepare_compile", "siii", std::string(CompileModeName(compile_)).c_str(),
        seq_len, microbatch_size, vocab));
    if (!done) {
      return StatusFromPythonError(interpreter_,
                                   absl::StrCat("model.python.compile: ", CompileModeName(compile_),
                                                ": the example microbatches"));
    }
    prepared_ = true;
    return absl::OkStatus();
  }

  void SetTraining(int k, bool training) override {
    training_[k] = training;
    ScopedGil gil;
    CallOrLog(k, "train", py::bool_(training));
  }

  void Move(int k, const torch::Device& device) override {
    ScopedGil gil;
    CallOrLog(k, "to", py::str(device.str()));
    // block.to() gave the block new buffer tensors (and the trace holds its device's
    // constants): compiled again on the next run, on the new device.
    compiled_[k].reset();
  }

 private:
  // Block k's compiled module for its mode, compiling it first when needed; InvalidArgument (the
  // glue's ModelError: what failed, what to do) when it cannot be. Runs with the GIL released:
  // the module is TorchScript, Python is not entered.
  absl::StatusOr<std::vector<torch::Tensor>> RunCompiled(int k,
                                                         const std::vector<torch::Tensor>& args) {
    if (!compiled_[k].has_value()) {
      if (absl::Status st = Compile(k); !st.ok()) return st;
    }
    torch::jit::Module& module = training_[k] ? compiled_[k]->training : compiled_[k]->eval;
    torch::jit::IValue out;
    try {
      // As for TorchScript models (torchscript.h): the graph executor's optimisations would fold
      // the block's backward into one DifferentiableGraph node, which B and W cannot split. The
      // switch is per thread, so it is set around every call rather than once at load.
      torch::jit::GraphOptimizerEnabledGuard per_op_graph(false);
      out = module.forward(std::vector<torch::jit::IValue>(args.begin(), args.end()));
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat(Label(k, names_), " (compiled): ", e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(Label(k, names_), " (compiled): ", e.what()));
    }
    return CompiledTensors(k, out);
  }

  absl::Status Compile(int k) {
    ScopedGil gil;
    py::object pair =
        py::reinterpret_steal<py::object>(PyObject_CallMethod(loaded_.ptr(), "compile", "i", k));
    if (!pair) {
      return StatusFromPythonError(
          interpreter_, absl::StrCat("model.python.compile: ", CompileModeName(compile_)));
    }
    std::optional<torch::jit::Module> training = torch::jit::as_module(pair[py::int_(0)]);
    std::optional<torch::jit::Module> eval = torch::jit::as_module(pair[py::int_(1)]);
    if (!training || !eval) {
      return absl::InternalError(absl::StrCat(Label(k, names_), ": compiled into no ScriptModule"));
    }
    compiled_[k] = Compiled{*std::move(training), *std::move(eval)};
    return absl::OkStatus();
  }

  // The Python exception set now, as a status naming the block. GIL held.
  absl::Status Raised(int k) const { return StatusFromPythonError(interpreter_, Label(k, names_)); }

  // What block k returned: one tensor, or the tensors of a tuple (or list). GIL held.
  absl::StatusOr<std::vector<torch::Tensor>> Tensors(int k, const py::object& out) const {
    std::vector<torch::Tensor> ys;
    if (THPVariable_Check(out.ptr())) {
      ys.push_back(THPVariable_Unpack(out.ptr()));
      return ys;
    }
    if (PyTuple_Check(out.ptr()) || PyList_Check(out.ptr())) {
      for (py::handle e : out) {
        if (!THPVariable_Check(e.ptr())) {
          return absl::InvalidArgumentError(absl::StrCat(
              Label(k, names_), " returned a tuple holding a ", Py_TYPE(e.ptr())->tp_name,
              "; every block must return one tensor or a tuple of tensors"));
        }
        ys.push_back(THPVariable_Unpack(e.ptr()));
      }
      if (!ys.empty()) return ys;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(Label(k, names_), " returned a ", Py_TYPE(out.ptr())->tp_name,
                     "; every block must return one tensor or a tuple of tensors"));
  }

  // The same for a compiled block's result (a tuple or list IValue for a tuple or list).
  absl::StatusOr<std::vector<torch::Tensor>> CompiledTensors(int k,
                                                             const torch::jit::IValue& out) const {
    std::vector<torch::Tensor> ys;
    if (out.isTensor()) {
      ys.push_back(out.toTensor());
      return ys;
    }
    if (out.isTuple() || out.isList()) {
      const std::vector<torch::jit::IValue> elements =
          out.isTuple() ? out.toTupleRef().elements().vec() : out.toListRef().vec();
      for (const torch::jit::IValue& e : elements) {
        if (!e.isTensor()) {
          return absl::InvalidArgumentError(absl::StrCat(
              Label(k, names_), " (compiled) returned a tuple holding a ", e.tagKind(),
              "; every block must return one tensor or a tuple of tensors"));
        }
        ys.push_back(e.toTensor());
      }
      if (!ys.empty()) return ys;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(Label(k, names_), " (compiled) returned a ", out.tagKind(),
                     "; every block must return one tensor or a tuple of tensors"));
  }

  // block.method(arg) for calls that cannot fail on a sane module; an error goes to the log
  // (with its traceback) rather than being lost. GIL held.
  void CallOrLog(int k, const char* method, const py::object& arg) {
    PyObject* r = PyObject_CallMethod(blocks_[k].ptr(), method, "O", arg.ptr());
    if (r == nullptr) {
      (void)StatusFromPythonError(interpreter_, absl::StrCat(Label(k, names_), ".", method, "()"));
    }
    Py_XDECREF(r);
  }

  const Interpreter& interpreter_;
  py::object loaded_;               // the glue's Model
  std::vector<std::string> names_;  // the blocks' names
  std::vector<py::object> blocks_;  // the blocks, nn.Modules
  const CompileMode compile_;
  bool prepared_ = false;                        // PrepareCompile succeeded: compiled runs
  std::vector<bool> training_;                   // [k]: block k's mode (SetTraining)
  std::vector<std::optional<Compiled>> compiled_;  // [k]: block k compiled on its device
};

class Plugin final : public PythonPlugin {
 public:
  absl::StatusOr<std::unique_ptr<PythonBlocks>> Load(const PythonModelSource& source) override {
    absl::StatusOr<Interpreter*> interpreter = Interpreter::Get();
    if (!interpreter.ok()) return interpreter.status();
    const std::string factory = source.factory.empty() ? "build_model" : source.factory;
    ScopedGil gil;
    py::object loaded = py::reinterpret_steal<py::object>(PyObject_CallFunction(
        (*interpreter)->Glue("load").ptr(), "sssK", source.file.c_str(), factory.c_str(),
        source.args_json.c_str(), static_cast<unsigned long long>(source.seed)));
    if (!loaded) {
      return StatusFromPythonError(**interpreter,
                                   absl::StrCat("model ", source.file, ": ", factory, "()"));
    }
    try {
      return std::make_unique<Blocks>(**interpreter, loaded, source.compile);
    } catch (const py::error_already_set& e) {
      return absl::InternalError(absl::StrCat("model ", source.file, ": ", e.what()));
    }
  }

  void SetOutput(std::function<void(std::string_view line)> sink) override {
    Interpreter::SetOutput(std::move(sink));
  }
};

}  // namespace
}  // namespace zpipe::worker::python

extern "C" __attribute__((visibility("default"))) zpipe::worker::python::PythonPlugin*
zpipe_python_plugin_v2() {
  static auto* plugin = new zpipe::worker::python::Plugin();
  return plugin;
}
