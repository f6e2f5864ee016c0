// Which registered workers may run which jobs, and what a job that finds too few of them says.
//
// The rule, from what each worker reported when it registered (WorkerCapabilities):
// - a CPU job runs on workers started for a CPU device (--device cpu or cpu:N);
// - a CUDA job runs on workers started for a CUDA device (--device cuda:N) whose LibTorch was
//   built with CUDA and sees device N, and which were built with the NCCL communicator (the CUDA
//   data path, docs/design.md "Execution on a worker"). A worker that reported no capabilities
//   (older than them) cannot show any of that and takes CPU jobs only.
// CUDA workers do not take CPU jobs: a job's device names the kind of worker it runs on, as it
// did before workers reported capabilities.
#ifndef ZPIPE_COORDINATOR_WORKER_MATCH_H_
#define ZPIPE_COORDINATOR_WORKER_MATCH_H_

#include <string>
#include <vector>

#include "coordinator/domain.h"

namespace zpipe::coordinator {

// Empty when `worker` can run a job on `device`; otherwise why not, as one short clause naming
// what is missing (e.g. "LibTorch 1.13.0 CPU-only").
std::string CannotRunReason(const WorkerRegistration& worker, DeviceKind device);

// The reason a PENDING job shows while fewer than its world size of idle, connected workers can
// run it (`available` is how many can). `registered` are the live (not dead) workers, in name
// order; those that can never run the job are named with why, so that a job no worker fits says
// what to change.
std::string WaitingReason(const JobSpec& spec, int available,
                          const std::vector<const WorkerRegistration*>& registered);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_MATCH_H_
