#include "worker/python/interpreter.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/python/glue_source.h"

namespace zpipe::worker::python {
namespace {

namespace py = pybind11;

// Frames of a traceback a failure reason keeps (the whole one goes to the log).
constexpr int kReasonFrames = 4;

ABSL_CONST_INIT absl::Mutex output_mu(absl::kConstInit);
Interpreter::OutputSink* output ABSL_GUARDED_BY(output_mu) = nullptr;  // leaked at exit

// _zpipe_glue._emit(line): one line of sys.stdout / sys.stderr, to the output sink.
PyObject* Emit(PyObject* /*self*/, PyObject* arg) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(arg, &size);
  if (text == nullptr) return nullptr;
  std::string line(text, static_cast<size_t>(size));
  Interpreter::OutputSink sink;
  {
    absl::MutexLock lock(&output_mu);
    if (output != nullptr) sink = *output;
  }
  Py_BEGIN_ALLOW_THREADS;
  if (sink) {
    sink(line);
  } else {
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

// The calling thread's kept thread state (ScopedGil): one PyGILState_Ensure left unmatched while
// the thread lives, so the state's count never drops to zero and no release deletes it. Its
// destructor, at thread exit, makes the matching release, which deletes the state.
class KeptThreadState {
 public:
  KeptThreadState() {
    PyGILState_Ensure();  // makes the thread state if the thread has none
    saved_ = PyEval_SaveThread();
  }
  ~KeptThreadState() {
    PyEval_RestoreThread(saved_);
    PyGILState_Release(PyGILState_UNLOCKED);
  }
  KeptThreadState(const KeptThreadState&) = delete;
  KeptThreadState& operator=(const KeptThreadState&) = delete;

 private:
  PyThreadState* saved_;
};

PyMethodDef kEmitDef = {"_emit", Emit, METH_O, "one line of output to the worker's log"};

absl::Status NotStarted(const std::string& exe, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "Python models: the worker's embedded Python (", exe, ") ", why,
      "; set ZPIPE_PYTHON to the bin/python of the venv whose torch is the worker's LibTorch"));
}

// Runs the glue's source as the module _zpipe_glue and routes the output. GIL held.
absl::StatusOr<PyObject*> LoadGlue(const std::string& exe) {
  PyObject* module = PyImport_AddModule("_zpipe_glue");  // borrowed; sys.modules keeps it
  if (module == nullptr) return NotStarted(exe, "cannot make the glue module");
  PyObject* globals = PyModule_GetDict(module);
  // Compiled under a name of its own, so tracebacks tell its frames from the model's.
  PyObject* code = Py_CompileString(kGlueSource, "<zeropipe glue>", Py_file_input);
  PyObject* done = code == nullptr ? nullptr : PyEval_EvalCode(code, globals, globals);
  Py_XDECREF(code);
  if (done == nullptr) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    std::string why = "cannot import torch";
    if (PyObject* text = value ? PyObject_Str(value) : nullptr) {
      if (const char* s = PyUnicode_AsUTF8(text)) why = absl::StrCat(why, " (", s, ")");
      Py_DECREF(text);
    }
    PyErr_Clear();
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    return NotStarted(exe, why);
  }
  Py_DECREF(done);
  PyObject* emit = PyCFunction_New(&kEmitDef, nullptr);
  PyObject* installed =
      emit == nullptr ? nullptr : PyObject_CallMethod(module, "install_output", "O", emit);
  Py_XDECREF(emit);
  if (installed == nullptr) {
    PyErr_Clear();
    return NotStarted(exe, "cannot route its output");
  }
  Py_DECREF(installed);
  Py_INCREF(module);
  return module;
}

}  // namespace

std::string PythonExecutable() {
  if (const char* env = std::getenv("ZPIPE_PYTHON"); env != nullptr && *env != '\0') return env;
  return ZPIPE_PYTHON_EXECUTABLE;
}

absl::StatusOr<Interpreter*> Interpreter::Get() {
  static const absl::StatusOr<Interpreter*>* started = new absl::StatusOr<Interpreter*>(Start());
  return *started;
}

absl::StatusOr<Interpreter*> Interpreter::Start() {
  const std::string exe = PythonExecutable();
  std::error_code ec;
  if (!std::filesystem::exists(exe, ec)) return NotStarted(exe, "does not exist");
  if (Py_IsInitialized()) return NotStarted(exe, "cannot start: Python already runs here");
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // SIGINT and SIGTERM stay the worker's
  config.parse_argv = 0;
  // The executable decides sys.prefix: a venv's bin/python brings its pyvenv.cfg and packages.
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, exe.c_str());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    return NotStarted(exe,
                      absl::StrCat("cannot start (", status.err_msg ? status.err_msg : "?", ")"));
  }
  absl::StatusOr<PyObject*> glue = LoadGlue(exe);
  // Whatever happened, the GIL goes: from here on callers take it for their calls only.
  PyEval_SaveThread();
  if (!glue.ok()) return glue.status();
  return new Interpreter(*glue);
}

ScopedGil::ScopedGil() {
  thread_local KeptThreadState kept;
  state_ = PyGILState_Ensure();
}

ScopedGil::~ScopedGil() { PyGILState_Release(state_); }

void Interpreter::SetOutput(OutputSink sink) {
  absl::MutexLock lock(&output_mu);
  delete output;
  output = sink ? new OutputSink(std::move(sink)) : nullptr;
}

py::object Interpreter::Glue(const char* name) const {
  return py::reinterpret_borrow<py::object>(glue_).attr(name);
}

absl::Status StatusFromPythonError(const Interpreter& interpreter, absl::string_view what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  py::object exc = py::reinterpret_steal<py::object>(value);
  py::object exc_type = py::reinterpret_steal<py::object>(type);
  py::object exc_tb = py::reinterpret_steal<py::object>(tb);
  if (!exc) return absl::InternalError(absl::StrCat(what, ": a Python error without a value"));
  std::string reason, full;
  bool contract = false;
  try {
    py::tuple texts = interpreter.Glue("describe")(exc, kReasonFrames);
    reason = texts[0].cast<std::string>();
    full = texts[1].cast<std::string>();
    contract = py::isinstance(exc, interpreter.Glue("ModelError"));
  } catch (const py::error_already_set& e) {
    reason = full = py::str(exc).cast<std::string>();
  }
  if (contract) return absl::InvalidArgumentError(absl::StrCat(what, ": ", reason));
  // The whole traceback to the log (`zpipe logs`); the reason keeps the frames that matter.
  try {
    py::module_::import("sys").attr("stderr").attr("write")(
        absl::StrCat(what, ": Python raised:\n", full, "\n"));
  } catch (const py::error_already_set&) {
    PyErr_Clear();
  }
  return absl::InternalError(absl::StrCat(what, ": Python raised:\n", reason));
}

}  // namespace zpipe::worker::python
