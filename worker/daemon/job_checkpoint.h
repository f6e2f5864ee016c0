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
// Saves happen after every `every`-th iteration and after the last one, in the background: at the
// iteration boundary the rank copies its state to host memory (SnapshotStages) and a
// CheckpointWriter writes the copy (stage files, marker, manifest, in that order) while the next
// iterations run; a save that comes while the previous one is still being written first waits
// for it. A failed write (disk full, file too large, permission) is a status, never a crash:
// with checkpoint.on_error fail (the default) it fails the job, with skip it is reported and
// training goes on; that checkpoint stays incomplete. With checkpoint.keep K > 0, a writer that
// has finished a checkpoint deletes all but the newest K complete ones and every incomplete one
// older than the newest complete one (PruneCheckpoints). Resume: when a job starts
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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "worker/comm/key_value_store.h"
#include "worker/daemon/checkpoint_writer.h"
#include "worker/daemon/job_config.h"
#include "worker/executor/checkpoint.h"
#include "worker/executor/executor.h"

namespace zpipe::worker {

struct CheckpointManifest {
  std::string job_name;
  std::string job_id;
  std::string schedule;
  int pipeline = 0;  // p
  int data = 0;      // d
  int stages = 0;    // S
  std::string optimizer;
  std::string model_json;  // the job's ModelSpec in proto JSON (JobSettings::model_json)
  int iteration = 0;       // K: iterations done; the resumed job starts at iteration K
  std::optional<double> loss;

  std::string ToJson() const;
  // InvalidArgument when `json` is not a manifest.
  static absl::StatusOr<CheckpointManifest> FromJson(absl::string_view json);
  // This job's manifest (iteration 0, no loss).
  static CheckpointManifest ForJob(const JobConfig& job);
};

// Empty when a checkpoint with `saved` can be loaded by a job with `job`; else every difference,
// e.g. "model.gpt.hidden is 32 in the checkpoint, 64 in this job".
std::string DescribeMismatch(const CheckpointManifest& saved, const CheckpointManifest& job);

// DIR/NAME for checkpoint.dir `dir` and spec.name `name`. InvalidArgument for a name that cannot
// name a directory ("." or "..").
absl::StatusOr<std::filesystem::path> CheckpointRoot(const std::string& dir,
                                                     const std::string& name);

// A failed checkpoint write marked permanent (permanent_error.h) when another attempt would meet
// the same disk: full (ENOSPC, EDQUOT, EFBIG), refusing (EACCES, EPERM, EROFS), or the path is
// not a folder (ENOENT, ENOTDIR). With checkpoint.on_error fail, the job then fails at once.
absl::Status PermanentIfDiskError(absl::Status status);

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

// Deletes, under `root` (DIR/NAME), all complete checkpoints but the newest `keep` (keep > 0) and
// every incomplete one older than the newest complete one. Incomplete ones newer than that may
// still be being written and are left alone. Returns the directories deleted; a directory that
// cannot be deleted is logged and skipped. Several ranks may prune the same root at once.
absl::StatusOr<std::vector<std::filesystem::path>> PruneCheckpoints(
    const std::filesystem::path& root, int keep);

struct JobCheckpointerOptions {
  // false: AfterIteration writes in the calling thread (what the benchmark compares against).
  bool background = true;
};

// One rank's side of checkpointing a job.
class JobCheckpointer {
 public:
  // nullptr when the job does not checkpoint (no job.settings.checkpoint). On ranks that write
  // (data rank 0), creates DIR/NAME and checks it is writable: an error then names the path.
  // Checkpoints follow `job.plan`'s placement (a re-plan keeps it).
  static absl::StatusOr<std::unique_ptr<JobCheckpointer>> Make(const JobConfig& job,
                                                               JobCheckpointerOptions options = {});
  // Waits for the write in flight; an error it had is logged only (call Finish to see it).
  ~JobCheckpointer();

  // The iteration to start at. Global rank 0 finds the resume point (FindResumePoint) and
  // publishes its decision in `store` (the job attempt's rendezvous; keys under the assignment's
  // rendezvous prefix); the other ranks wait up to `timeout` for it. With a resume point, every
  // rank loads its stages into `executor`. Errors (mismatch, unreadable files) fail every rank.
  absl::StatusOr<int> Resume(Executor& executor, KeyValueStore& store, absl::Duration timeout);

  // What checkpointing did at one iteration boundary (AfterIteration) or at the end (Finish).
  struct Step {
    bool started = false;     // a checkpoint of this iteration was handed to the writer
    absl::Duration stall;     // the caller was held this long: snapshot + waited
    absl::Duration snapshot;  // copying the state to host memory
    absl::Duration waited;    // waiting for the previous write to finish
    // checkpoint.on_error skip: the errors of writes that failed, as they came back ("; "-joined);
    // empty when none did.
    std::string skipped;
  };

  // Call after each iteration with `completed` = iterations done so far and the iteration's loss
  // (set on the rank of the last stage). When a checkpoint is due, waits for the write in flight,
  // copies the state and starts writing it; otherwise only collects a finished write's result.
  // No-op on ranks that do not write. A failed write (with on_error fail) is an error naming the
  // file and the OS error; it comes back here as soon as it is seen, or from Finish.
  absl::StatusOr<Step> AfterIteration(const Executor& executor, int completed,
                                      std::optional<double> loss);

  // Call once training is over: waits for the write in flight and returns its result as
  // AfterIteration would (`waited` is the time spent waiting).
  absl::StatusOr<Step> Finish();

 private:
  JobCheckpointer() = default;
  // Creates root_ and writes a probe file into it.
  absl::Status ProbeRoot() const;
  // The write of one checkpoint (on the writer's thread): stage files, marker, manifest, prune.
  absl::Status Write(const std::filesystem::path& dir, const std::vector<StageSnapshot>& stages,
                     int completed, std::optional<double> loss) const;
  // Applies on_error to a finished write's result: OK, an error (fail), or noted in `step`.
  absl::Status Collect(absl::Status result, Step& step) const;

  std::string job_id_;
  std::string rendezvous_prefix_;  // of the job attempt's rendezvous keys
  RankPosition rank_;
  CheckpointManifest job_;
  std::filesystem::path root_;
  int every_ = 0;
  int iterations_ = 0;
  bool writer_ = false;           // data rank 0
  bool writes_manifest_ = false;  // writer holding the last stage
  std::vector<int> stages_;       // this rank's stages
  int keep_ = 0;                  // checkpoint.keep; 0 = all
  bool skip_errors_ = false;      // checkpoint.on_error: skip
  bool background_ = true;
  // Last: destroyed first, so an in-flight write never outlives the members it reads.
  CheckpointWriter writer_thread_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_CHECKPOINT_H_
