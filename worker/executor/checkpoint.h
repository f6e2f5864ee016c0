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
// Call between iterations only, from the thread that drives the executor.
#ifndef ZPIPE_WORKER_EXECUTOR_CHECKPOINT_H_
#define ZPIPE_WORKER_EXECUTOR_CHECKPOINT_H_

#include <torch/torch.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/executor/executor.h"

namespace zpipe::worker {

// "stage-<s>.pt".
std::string StageCheckpointFileName(int stage);

// Writes StageCheckpointFileName(s) into `dir` (which must exist) for every stage of `executor`,
// each atomically: a temporary name in `dir`, fsync, rename, fsync of `dir`. An error (e.g.
// PermissionDenied, NotFound) names the file; a failed write leaves no partial file behind.
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
