// RunAssignment: executes one job assignment on this worker from start to end.
//
// Builds the rank's stages (GPT or synthetic) from the assignment, bootstraps the communicator
// through the coordinator's rendezvous, runs the executor for every iteration, reports each
// iteration's measurements and, at the end, that the rank finished. Progress of every action goes
// through a ProgressReporter. Returns the first error (the caller reports it as the rank's
// failure); returns CANCELLED when `cancelled` became true.
#ifndef ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_
#define ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/daemon/data_roots.h"
#include "worker/daemon/plan_switch.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::worker {

class WorkerMetrics;

struct JobRunnerOptions {
  std::string hostname = "127.0.0.1";  // address the TCP streams bind and advertise
  absl::Duration comm_timeout = absl::Seconds(60);
  WorkerMetrics* metrics = nullptr;  // optional; updated after every iteration
  // Sent with rendezvous calls: this process's instance_id and token (see grpc_store.h).
  std::string instance_id;
  std::string token;
  // The device this worker was started for (--device): a `device: cuda` job's stages, optimizer
  // state and gradient buckets live on CUDA device `device_index`, its data path is NCCL.
  zpipe::v1::DeviceKind device_kind = zpipe::v1::DEVICE_KIND_CPU;
  int device_index = 0;
  // The folders the job's files must lie in (required, must outlive the call); a job naming a
  // path outside them fails before it touches anything.
  const DataRoots* data_roots = nullptr;
  // Re-plans for this job from the coordinator (optional; must outlive the call).
  PlanUpdateChannel* plan_updates = nullptr;
};

// Why this worker cannot run a `device: cuda` job, or OK when it can: started for a CUDA device,
// LibTorch built with CUDA and seeing that device, built with the NCCL communicator.
absl::Status CanRunCudaJobs(const JobRunnerOptions& options);

using SendToCoordinator = std::function<bool(const zpipe::v1::WorkerMessage&)>;

// Loads a TorchScript job's model and data (the checks a job's start makes, so a broken model or
// data file fails the job before it is planned) and times every block on this worker
// (model/block_profile.h). When the job will resume from a checkpoint, also returns that
// checkpoint's cuts. Problems come back in the result's `error`, never as a crash; a path outside
// `data_roots` is one, found before anything is opened.
zpipe::v1::ProfileResult ProfileJob(const zpipe::v1::ProfileRequest& request,
                                    const DataRoots& data_roots);

absl::Status RunAssignment(const zpipe::v1::Assignment& assignment,
                           zpipe::v1::WorkerService::StubInterface& stub,
                           const SendToCoordinator& send, const JobRunnerOptions& options,
                           const std::atomic<bool>& cancelled);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_
