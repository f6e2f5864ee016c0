// Job checkpoints: where a job's checkpoints live, how its ranks write them, and which one a
// job resumes from. The per-stage files themselves are worker/executor/checkpoint.h.
//
// Layout (DIR = spec.checkpoint.dir, NAME = spec.name):
//   DIR/NAME/iter-<K>/stage-<s>.pt    stage s's parameters and optimizer state after K iterations
//   DIR/NAME/iter-<K>/rank-<r>.done   pipeline rank r has written all of its stages' files
//   DIR/NAME/iter-<K>/manifest.json   job name and id, schedule, p, d, stages, optimizer, model,
//                                     iteration K and the loss of iteration K-1 (data replica 0)
// Only data rank 0 of each pipeline rank writes (DP replicas hold identical parameters and
// optimizer state after the averaged step). A rank writes its stage files (each atomically),
// then its marker; the rank holding the last stage then writes the manifest. Before rewriting an
// existing iter-<K> a rank removes its marker (and the manifest, if it is the manifest's writer)
// first. So a checkpoint is COMPLETE iff manifest.json exists and rank-<r>.done exists for every
// r < the manifest's p; anything else (a crash mid-save) is incomplete and skipped.
//
// Saves happen after every `every`-th iteration and after the last one. Resume: when a job starts
// with checkpointing on, it continues from the latest complete checkpoint under DIR/NAME whose K
// is at most train.iterations (K == iterations: nothing is left to run). That checkpoint must
// match the job: same model spec, number of stages and optimizer (schedule, p, d, batch, lr and
// iteration count may change); otherwise the job fails naming what differs, and older
// checkpoints are not tried. Global rank 0 decides and tells the other ranks through the job's
// rendezvous store, so every rank loads the same K even if their views of DIR differ.
//
// The workers, not the coordinator, read and write DIR: it must be a path every worker of the job
// can reach (one machine, or a shared volume mounted at the same path in every worker pod).
#ifndef ZPIPE_WORKER_DAEMON_JOB_CHECKPOINT_H_
#define ZPIPE_WORKER_DAEMON_JOB_CHECKPOINT_H_

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "worker/comm/key_value_store.h"
#include "worker/executor/executor.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

struct CheckpointManifest {
  std::string job_name;
  std::string job_id;
  std::string schedule;
  int pipeline = 0;  // p
  int data = 0;      // d
  int stages = 0;    // S
  std::string optimizer;
  std::string model_json;  // the job's ModelSpec in proto JSON (field names as in the .proto)
  int iteration = 0;       // K: iterations done; the resumed job starts at iteration K
  std::optional<double> loss;

  std::string ToJson() const;
  // InvalidArgument when `json` is not a manifest.
  static absl::StatusOr<CheckpointManifest> FromJson(absl::string_view json);
  // This job's manifest (iteration 0, no loss).
  static CheckpointManifest ForJob(const zpipe::v1::Assignment& assignment, const core::Plan& plan);
};

// Empty when a checkpoint with `saved` can be loaded by a job with `job`; else every difference,
// e.g. "model.gpt.hidden is 32 in the checkpoint, 64 in this job".
std::string DescribeMismatch(const CheckpointManifest& saved, const CheckpointManifest& job);

// DIR/NAME. InvalidArgument for a name that cannot name a directory ("." or "..").
absl::StatusOr<std::filesystem::path> CheckpointRoot(const zpipe::v1::JobSpec& spec);

struct ResumePoint {
  std::filesystem::path dir;  // DIR/NAME/iter-<K>
  CheckpointManifest manifest;
};

// The latest complete checkpoint under `root` with K <= `max_iteration`; nullopt when there is
// none (or `root` does not exist). FailedPrecondition, naming the checkpoint and the
// differences, when that checkpoint does not match `job`.
absl::StatusOr<std::optional<ResumePoint>> FindResumePoint(const std::filesystem::path& root,
                                                           const CheckpointManifest& job,
                                                           int max_iteration);

// The latest complete checkpoint under `root` (DIR/NAME), whatever job wrote it; nullopt when
// there is none.
absl::StatusOr<std::optional<ResumePoint>> LatestCompleteCheckpoint(
    const std::filesystem::path& root);

// One rank's side of checkpointing a job.
class JobCheckpointer {
 public:
  // nullptr when the job does not checkpoint (checkpoint.every == 0). On ranks that write
  // (data rank 0), creates DIR/NAME and checks it is writable: an error then names the path.
  static absl::StatusOr<std::unique_ptr<JobCheckpointer>> Make(
      const zpipe::v1::Assignment& assignment, const core::Plan& plan);

  // The iteration to start at. Global rank 0 finds the resume point (FindResumePoint) and
  // publishes its decision in `store` (the job attempt's rendezvous; keys under the assignment's
  // rendezvous prefix); the other ranks wait up to `timeout` for it. With a resume point, every
  // rank loads its stages into `executor`. Errors (mismatch, unreadable files) fail every rank.
  absl::StatusOr<int> Resume(Executor& executor, KeyValueStore& store, absl::Duration timeout);

  // Call after each iteration with `completed` = iterations done so far and the iteration's loss
  // (set on the rank of the last stage). Saves when a checkpoint is due; no-op on ranks that do
  // not write. Errors name the path.
  absl::Status AfterIteration(const Executor& executor, int completed, std::optional<double> loss);

 private:
  JobCheckpointer() = default;

  zpipe::v1::Assignment assignment_;
  CheckpointManifest job_;
  std::filesystem::path root_;
  int every_ = 0;
  int iterations_ = 0;
  bool writer_ = false;           // data rank 0
  bool writes_manifest_ = false;  // writer holding the last stage
  std::vector<int> stages_;       // this rank's stages
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_CHECKPOINT_H_
