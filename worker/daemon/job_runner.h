// RunJob: executes one rank of a job on this worker from start to end.
//
// Works on the domain view of the assignment (job_config.h; the daemon converts the proto on
// entry, job_proto.h). A short sequence of named steps: check the job may run here (data roots,
// device), build the rank's stages (GPT, synthetic, TorchScript or Python), open its data,
// connect the communicator through the job's rendezvous, build gradient sync and the executor,
// resume from a checkpoint, then run every iteration (switching plans when all ranks agreed,
// checkpointing, evaluating) and report each iteration and, at the end, that the rank finished.
// Returns the first error (the caller reports it as the rank's failure); returns CANCELLED when
// `cancelled` became true.
#ifndef ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_
#define ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/partition.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/daemon/data_roots.h"
#include "worker/daemon/job_config.h"
#include "worker/daemon/job_reporter.h"
#include "worker/daemon/plan_switch.h"

namespace zpipe::worker {

class WorkerMetrics;

struct JobRunnerOptions {
  std::string hostname = "127.0.0.1";  // address the TCP streams bind and advertise
  absl::Duration comm_timeout = absl::Seconds(60);
  WorkerMetrics* metrics = nullptr;  // optional; updated after every iteration
  // The device this worker was started for (--device): a `device: cuda` job's stages, optimizer
  // state and gradient buckets live on CUDA device `device_index`, its data path is NCCL.
  DeviceKind device_kind = DeviceKind::kCpu;
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

// What profiling a job found (worker.proto ProfileResult): every block's cost, or the error.
struct JobProfile {
  // Non-empty: the model or the data cannot be used (it names the file and the problem).
  std::string error;
  std::vector<core::BlockCost> blocks;  // one per block, in order
  // Set when the job will resume from a checkpoint: its cut points, which must be kept.
  std::vector<int> checkpoint_cuts;
};

// Loads a TorchScript or Python job's model and data (the checks a job's start makes, so a broken model or
// data file fails the job before it is planned) and times every block on this worker
// (model/block_profile.h). When the job will resume from a checkpoint, also returns that
// checkpoint's cuts. Problems come back in the result's `error`, never as a crash; a path outside
// `data_roots` is one, found before anything is opened.
JobProfile ProfileJob(const JobSettings& job, const DataRoots& data_roots);

// `rendezvous`: the job's store (the coordinator's, keys used as given; job.rendezvous_prefix
// starts each key of this attempt). `reports` gets every action, iteration and the rank's end.
// Both must outlive the call.
absl::Status RunJob(const JobConfig& job, KeyValueStore& rendezvous, JobReporter& reports,
                    const JobRunnerOptions& options, const std::atomic<bool>& cancelled);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_RUNNER_H_
