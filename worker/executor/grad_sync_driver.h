// GradSyncDriver over worker/grad_sync's GradSync: the executor's countdown hooks mapped onto
// exactly-once bucket reduction.
#ifndef ZPIPE_WORKER_EXECUTOR_GRAD_SYNC_DRIVER_H_
#define ZPIPE_WORKER_EXECUTOR_GRAD_SYNC_DRIVER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/executor/executor.h"
#include "worker/grad_sync/grad_sync.h"
#include "worker/model/stage.h"

namespace zpipe::worker {

// Builds a GradSync for this rank's `stages` (buckets of `options.bucket_bytes`), makes every
// parameter's .grad a view into its bucket, and wraps it as the executor's driver. `comm` and
// `stages` must outlive the driver.
absl::StatusOr<std::unique_ptr<GradSyncDriver>> NewGradSyncDriver(
    const core::Plan& plan, int pipeline_rank,
    const std::vector<std::unique_ptr<model::Stage>>& stages, const GradSyncOptions& options,
    Communicator& comm);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_GRAD_SYNC_DRIVER_H_
