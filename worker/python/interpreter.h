// Interpreter: the CPython embedded in a worker process, for models defined in Python
// (python_model.h). Part of the plugin libzpipe_python.so (python_plugin.h), never of the worker
// binary itself.
//
// One interpreter per process, started on first use (Get) from the Python installation of the
// venv whose torch wheel is the worker's LibTorch: the same libtorch, libtorch_python and
// libpython are loaded once, so a tensor crosses between C++ and Python as the same at::Tensor
// (THPVariable_Wrap / THPVariable_Unpack), without a copy. The interpreter's executable is
// $ZPIPE_PYTHON when set, else the ZPIPE_PYTHON the worker was built with (a venv's bin/python:
// its pyvenv.cfg gives the venv's site-packages). It never installs signal handlers (the
// worker's own stay in force) and is never finalised (torch keeps Python objects alive to the
// end of the process).
//
// The GIL: released as soon as the interpreter is up; whoever calls into Python takes it
// (ScopedGil) for the call only, so communication, gradient sync and reporting threads never wait
// for Python. A thread that calls in keeps its Python thread state until it exits (ScopedGil says
// why).
//
// Output: sys.stdout and sys.stderr are replaced by writers that hand every complete line (and
// what is pending at flush()) to the output sink (SetOutput; stderr of the process until one is
// set), so a model's print() and warnings reach the worker's log and `zpipe logs`.
//
// Only the plugin's sources include this header (it brings Python.h and pybind11). Thread-safety:
// Get and SetOutput may be called from any thread.
#ifndef ZPIPE_WORKER_PYTHON_INTERPRETER_H_
#define ZPIPE_WORKER_PYTHON_INTERPRETER_H_

// Python.h first, as CPython asks.
#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker::python {

// The Python executable the interpreter starts from (see the file comment).
std::string PythonExecutable();

// Holds the GIL for its scope, like py::gil_scoped_acquire, under the calling thread's own Python
// thread state, made on the thread's first ScopedGil and deleted when the thread exits.
//
// Why: py::gil_scoped_acquire (and PyGILState_Ensure) on a thread without a thread state makes
// one and deletes it again when the scope ends. From a worker's second job on (or after a
// profile), the job's thread is not the thread that started Python, so every block call paid for
// a new thread state and its frame stack (mapped, faulted in, unmapped), and so did every GIL
// take LibTorch makes on that thread to free a tensor a Python object refers to (B and W free the
// forward's saved tensors): a trivial stage's F cost 14 µs instead of 5.4, B and W a few µs
// more, and F of four GPT blocks about 10% more (docs/performance.md "The Python path"). With the
// state kept, both find it and only take the lock.
//
// Must not be nested inside a scope that already holds the GIL on this thread. The thread state
// outlives the scope but not the thread: a thread_local deletes it when the thread exits (taking
// the GIL then).
class ScopedGil {
 public:
  ScopedGil();
  ~ScopedGil();
  ScopedGil(const ScopedGil&) = delete;
  ScopedGil& operator=(const ScopedGil&) = delete;

 private:
  PyGILState_STATE state_;
};

class Interpreter {
 public:
  // The process's interpreter, started on the first call (a second of import torch). The
  // first call's error is every call's: FailedPrecondition naming the executable when it is
  // missing, cannot start, or cannot import torch.
  static absl::StatusOr<Interpreter*> Get();

  using OutputSink = std::function<void(std::string_view line)>;
  // Where the lines of sys.stdout / sys.stderr go from now on; called with the GIL held (and
  // released around the call), one line at a time, without its newline. Must not call Python.
  static void SetOutput(OutputSink sink);

  // The glue module's attribute `name`; call with the GIL held. The glue is the Python half of
  // this component (glue.py: the model loader, output writers, error formatting).
  pybind11::object Glue(const char* name) const;

 private:
  explicit Interpreter(PyObject* glue) : glue_(glue) {}
  static absl::StatusOr<Interpreter*> Start();
  PyObject* glue_;  // the glue module, alive for the process
};

// With the GIL held and a Python exception set (which it clears): the exception as a status.
// A ModelError of the glue (a broken model contract) becomes InvalidArgument with its message;
// anything else Internal with `what`, then the traceback's last frames and the exception line.
// The whole traceback goes to the output sink.
absl::Status StatusFromPythonError(const Interpreter& interpreter, absl::string_view what);

}  // namespace zpipe::worker::python

#endif  // ZPIPE_WORKER_PYTHON_INTERPRETER_H_
