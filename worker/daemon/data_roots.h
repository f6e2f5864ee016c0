// DataRoots: the folders a worker lets its jobs read and write (zpipe-worker --data-root,
// repeatable; by default only its working directory). A job names files the worker opens with
// the worker's own rights: model.torchscript.path, data.path and eval.path are read,
// model.python.file is run as code, checkpoint.dir is created, written and read back. Whoever may submit jobs must not reach the
// rest of the worker's filesystem through them, so every such path is checked before the job
// touches anything: made absolute against the working directory (where the worker opens a
// relative path), resolved through symlinks and ".." (std::filesystem::weakly_canonical, so a
// checkpoint folder that does not exist yet is resolved as far as it exists), and compared
// component-wise with the roots, which are resolved the same way once at start-up.
//
// A symlink created under a root after the check could still point elsewhere; roots are meant
// for folders the job's submitter cannot write to by other means than the worker itself.
// Immutable after Make(); thread-safe.
#ifndef ZPIPE_WORKER_DAEMON_DATA_ROOTS_H_
#define ZPIPE_WORKER_DAEMON_DATA_ROOTS_H_

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/daemon/job_config.h"

namespace zpipe::worker {

class DataRoots {
 public:
  // `roots` as given to --data-root; empty = the current working directory. Each must be an
  // existing directory: INVALID_ARGUMENT "--data-root DIR: ..." otherwise.
  static absl::StatusOr<DataRoots> Make(const std::vector<std::string>& roots);

  // OK when `path` lies under a root (or is one). PERMISSION_DENIED "FIELD 'PATH' (resolves to
  // X) is outside this worker's data roots (R1, R2); start zpipe-worker with --data-root DIR to
  // allow it" otherwise. An empty path is OK (the field is not set).
  absl::Status Check(absl::string_view field, const std::string& path) const;

  // Check() for every path `job` makes the worker touch: model.torchscript.path,
  // model.python.file, data.path, eval.path and, when checkpoints are on, checkpoint.dir. The
  // first refusal.
  absl::Status CheckJob(const JobSettings& job) const;

  const std::vector<std::filesystem::path>& roots() const { return roots_; }

 private:
  std::vector<std::filesystem::path> roots_;  // canonical
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_DATA_ROOTS_H_
