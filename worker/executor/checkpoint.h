// Checkpoint of one executor's training state: for every model stage it runs, the stage's
// parameters and the optimizer state of exactly those parameters, in one LibTorch archive per
// stage (`stage-<s>.pt`).
//
// Per stage rather than per rank, so a checkpoint does not depend on the placement: a job with
// another schedule or pipeline size but the same stages loads it. Inside a file, parameters are
// matched by their global name (ParamInfo::name) and checked for shape and dtype; optimizer state
// (Adam/AdamW: step, exp_avg, exp_avg_sq[, max_exp_avg_sq]; SGD: momentum_buffer) is keyed the
// same way. Restoring both makes the next iteration compute what the uninterrupted run would
// have (same data, same parameters, same moments and step count).
//
// The job-level layout around these files (directories, manifest, completion markers, which
// checkpoint to resume) is worker/daemon/job_checkpoint.h.
//
// Saving is two steps, so that only the first holds up training: SnapshotStages copies the state
// to host memory (call between iterations, from the thread that drives the executor), and
// WriteStageSnapshots serializes and writes that copy (any thread, while training goes on). The
// archive is streamed to the file with plain POSIX calls through a sink that never reports a
// failure to LibTorch, so a write error (disk full, file too large, I/O error) comes back as a
// status: LibTorch 1.13's archive writer, told of a failed write, throws again from its
// destructor, which ends the process.
#ifndef ZPIPE_WORKER_EXECUTOR_CHECKPOINT_H_
#define ZPIPE_WORKER_EXECUTOR_CHECKPOINT_H_

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/executor/executor.h"

namespace zpipe::worker {

// "stage-<s>.pt".
std::string StageCheckpointFileName(int stage);

// One stage's parameters and optimizer state, copied to host memory: nothing in it aliases the
// executor's tensors, so it stays valid while training changes them.
struct StageSnapshot {
  int stage = 0;
  std::string optimizer;           // "adamw", "adam", "sgd" or "none"
  std::vector<std::string> names;  // ParamInfo::name, in params() order
  std::vector<torch::Tensor> params;
  // Optimizer state by params() index; a parameter without state has none of its keys.
  struct State {
    std::optional<int64_t> step;  // Adam, AdamW
    torch::Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
    torch::Tensor momentum_buffer;  // SGD
  };
  std::vector<std::optional<State>> states;

  int64_t bytes() const;  // tensor bytes held
};

// Copies every stage of `executor` to host memory. ResourceExhausted / Internal when a copy
// fails (e.g. out of memory); the executor is never changed.
absl::StatusOr<std::vector<StageSnapshot>> SnapshotStages(const Executor& executor);

// Writes StageCheckpointFileName(s) into `dir` (which must exist) for every snapshot, each
// atomically: written to a temporary name in `dir`, fsync, rename, fsync of `dir`. Never throws. An
// error names the file and the OS error ("cannot write '.../stage-3.pt': No space left on device";
// ResourceExhausted for ENOSPC, EDQUOT and EFBIG, PermissionDenied, NotFound, else Internal); the
// temporary file is removed, files already renamed stay. The bytes written depend only on the
// snapshot.
absl::Status WriteStageSnapshots(const std::vector<StageSnapshot>& snapshots,
                                 const std::filesystem::path& dir);

// SnapshotStages then WriteStageSnapshots, in the calling thread.
absl::Status SaveStageCheckpoints(const Executor& executor, const std::filesystem::path& dir);

// Loads every stage of `executor` from `dir`: copies each parameter in place (storage, views and
// .grad are kept) and replaces the optimizer state of those parameters. Nothing is changed unless
// every file is readable and matches: NotFound naming a missing file; InvalidArgument naming the
// stage and what differs (a parameter missing or extra, its shape or dtype, the optimizer kind).
absl::Status LoadStageCheckpoints(Executor& executor, const std::filesystem::path& dir);

// The key of `p` in Optimizer::state(): its TensorImpl address, as a string in LibTorch 1.x and
// as the pointer itself in 2.x.
template <typename Optimizer = torch::optim::Optimizer>  // a template, for `if constexpr`
auto OptimizerStateKey(const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(std::declval<Optimizer&>().state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    // 1.x's own key, c10::guts::to_string (gone in 2.x): the address as `<<` prints it.
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The parameters saved in one stage file, by global name (ParamInfo::name), in saved order: what
// an export puts back into the user's model. NotFound / DataLoss / InvalidArgument name the file.
absl::StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> ReadStageParameters(
    const std::filesystem::path& file);

// Writes `contents` to `path` atomically (temporary name beside it, fsync, rename, fsync of the
// directory). Errors name `path`.
absl::Status WriteFileAtomically(const std::filesystem::path& path, absl::string_view contents);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_CHECKPOINT_H_
