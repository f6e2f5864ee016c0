// How a worker runs a Python model's blocks (job spec model.python.compile), as an enum: parsed
// once where the worker reads its assignment (daemon/job_proto.cc), carried to the plugin in
// PythonModelSource (python_plugin.h). Header-only with abseil alone, so the daemon's job config
// can name it in a worker built without Python models.
//
// The names are job.proto's; the coordinator validates them too (coordinator/spec_validator.cc).
#ifndef ZPIPE_WORKER_PYTHON_COMPILE_MODE_H_
#define ZPIPE_WORKER_PYTHON_COMPILE_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker::python {

// kNone: each block's eager forward (Python runs every F). kTrace: torch.jit.trace of each block,
// once per mode (training, eval), checked against the eager forward; F then runs the traced
// graph in C++ without Python. kScript: torch.jit.script of each block, checked the same way.
enum class CompileMode { kNone, kTrace, kScript };

inline absl::string_view CompileModeName(CompileMode mode) {
  switch (mode) {
    case CompileMode::kNone:
      return "none";
    case CompileMode::kTrace:
      return "trace";
    case CompileMode::kScript:
      return "script";
  }
  return "?";
}

// InvalidArgument naming `name` and the names known; an empty name is unknown too (the
// coordinator resolves the default, "none", before a job reaches a worker).
inline absl::StatusOr<CompileMode> ParseCompileMode(absl::string_view name) {
  for (CompileMode m : {CompileMode::kNone, CompileMode::kTrace, CompileMode::kScript}) {
    if (name == CompileModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown compile mode '", name.substr(0, 64),
                                                 "' (expected none, trace or script)"));
}

}  // namespace zpipe::worker::python

#endif  // ZPIPE_WORKER_PYTHON_COMPILE_MODE_H_
