// Gradient sync under zero bubble: plan-driven, exactly-once, overlapped bucket all-reduces.
//
// Autograd hooks cannot tell when a gradient is final once W is deferred (docs/design.md
// "Gradient sync"), so readiness comes from the plan. Each local chunk's parameters are
// packed into contiguous, reverse-layer-ordered flat float32 buckets; each bucket knows how many
// gradient contributions this rank's plan gives it per iteration; the executor reports every
// contribution as it is issued; at zero the bucket's all-reduce (average over the DP group) is
// launched at once, exactly once.
//
// What a contribution is: one accumulation into one parameter's gradient. Parameters are the
// model's own descriptions (model::ParamInfo, worker/model/param_info.h). A parameter that
// accumulates during B (phase kB: LayerNorm, embeddings) contributes in every B and BW of its
// stage; one that accumulates during W (phase kW: split linear weights and biases) in every W and
// BW; each such action contributes `accumulations_per_microbatch` times (tied or reused weights):
// model::Accumulations. So a bucket expects sum over its parameters of accumulations x (number of
// contributing actions of its stage on this rank), i.e. m x accumulations per parameter for a
// plan that runs every microbatch once.
//
// Launch order: buckets launch in the order of the REDUCE actions core::PlanGradSync derives from
// the plan and this layout (after each bucket's last contributing action, ties in layout order).
// A bucket that reaches zero before an earlier one in that order waits for it, so the order is
// the same on every DP replica whatever the executor's timing (the TCP streams and NCCL match collectives
// by order). REDUCE actions already in the plan are ignored; launches follow the countdown.
//
// Gradient storage: each parameter's gradient is a view into its bucket (GradView, AttachGrads);
// accumulate into it in place (`grad.add_(g)`, or autograd's in-place accumulation into an
// existing .grad) and never replace it (no `grad = None`, no `set_to_none` zeroing):
// BeginIteration zeroes the buckets. After FinishIteration returns OK every gradient is the
// average over the DP group.
#ifndef ZPIPE_WORKER_GRAD_SYNC_GRAD_SYNC_H_
#define ZPIPE_WORKER_GRAD_SYNC_GRAD_SYNC_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "worker/comm/communicator.h"
#include "worker/model/param_info.h"

namespace zpipe::worker {

// A stage's parameters are its model::ParamInfo list (Stage::params()), in the model's fixed
// order: the index in that list is how the executor names a parameter. Grad sync reads a
// parameter's name, size (tensor.numel()), layer (buckets fill from the last layer back), phase
// and accumulations_per_microbatch.

// One bucket of one stage: its parameters' gradients, packed back to back.
struct BucketLayout {
  int stage = 0;
  int index = 0;                 // within the stage, in reverse layer order
  std::vector<int> params;       // indices into the stage's params() list, in packing order
  std::vector<int64_t> offsets;  // element offset of each of `params` in the flat buffer
  int64_t numel = 0;
  bool grads_in_b = false;  // some parameter accumulates during B
  bool grads_in_w = false;  // some parameter accumulates during W
};

// Packs `params` of `stage` in reverse layer order (later layers first; within a layer, the
// later-listed parameter first) into buckets of at most `bucket_bytes` of float32. A parameter
// larger than that gets a bucket of its own; parameters with numel 0 are left out.
std::vector<BucketLayout> PackBuckets(int stage, const std::vector<model::ParamInfo>& params,
                                      int64_t bucket_bytes);

struct GradSyncOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // grad_sync.bucket_mb
  // grad_sync.overlap; false = the baseline: every bucket reduces in FinishIteration, after the
  // last action.
  bool overlap = true;
  // FinishIteration's bound on waiting for the reductions (the communicator's own timeout
  // usually fires first).
  absl::Duration wait_timeout = absl::Minutes(5);
};

// What happened to one bucket in the current (or last finished) iteration. Times are steady-clock
// and only meaningful once the matching flag is set.
struct BucketRecord {
  int chunk = 0;
  int stage = 0;
  int bucket = 0;  // index within the stage
  int64_t numel = 0;
  int expected = 0;       // contributions per iteration
  int received = 0;       // contributions so far
  int launches = 0;       // all-reduces launched this iteration (exactly 1 when all is well)
  bool ready = false;     // count reached zero
  bool finished = false;  // its all-reduce completed (successfully or not)
  std::chrono::steady_clock::time_point ready_time;   // last contribution arrived
  std::chrono::steady_clock::time_point launch_time;  // AllReduceAverage called
  std::chrono::steady_clock::time_point start_time;   // transport started
  std::chrono::steady_clock::time_point end_time;     // transport finished
  absl::Status status;                                // the all-reduce's result
};

// Not thread-safe: one executor thread drives it. `comm` must outlive it.
class GradSync {
 public:
  // `plan` is the (lowered or compute-only) plan of all pipeline ranks; this object serves
  // pipeline rank `rank`. `params_by_chunk[c]` lists the parameters of local chunk c (stage
  // plan.placement.StageOf(rank, c)). INVALID_ARGUMENT for shape mismatches; FAILED_PRECONDITION
  // when a bucket would receive no contribution from the plan (it could never fire).
  static absl::StatusOr<std::unique_ptr<GradSync>> Create(
      const core::Plan& plan, int rank, std::vector<std::vector<model::ParamInfo>> params_by_chunk,
      const GradSyncOptions& options, Communicator& comm);

  ~GradSync();

  // Buckets in launch order (the same on every DP replica).
  const std::vector<BucketLayout>& buckets() const { return buckets_; }

  // The flat (numel) view of parameter `param` of `stage`'s gradient inside its bucket.
  absl::StatusOr<torch::Tensor> GradView(int stage, int param) const;
  // Makes params[i].grad a view of its bucket slice, shaped like the parameter. `params` are the
  // stage's parameters in ParamInfo order (float32, on the communicator's device).
  absl::Status AttachGrads(int stage, const std::vector<torch::Tensor>& params);

  // Starts an iteration: zeroes every bucket and resets the counts. FAILED_PRECONDITION while the
  // previous iteration has not been finished.
  absl::Status BeginIteration();

  // One accumulation into parameter `param` of `stage` has been issued. Launches the bucket's
  // all-reduce when this was its last contribution (overlap on). FAILED_PRECONDITION naming the
  // bucket when it had already received all its contributions (also kept in errors());
  // INVALID_ARGUMENT for a stage or parameter this rank does not hold.
  absl::Status OnContribution(int stage, int param);
  // `count` contributions into bucket `bucket` (index within `stage`) at once.
  absl::Status OnBucketContribution(int stage, int bucket, int count = 1);
  // Every contribution compute action `action` (B, W or BW of a local stage) makes, bucket by
  // bucket in layout order; other actions are ignored. For executors that do not track single
  // parameters.
  absl::Status OnActionDone(const core::Action& action);

  // For the executor at a plan REDUCE action of local chunk `chunk`: with overlap on, the bucket
  // must have been launched by now (FAILED_PRECONDITION naming it otherwise, also kept in
  // errors()); with overlap off it launches in FinishIteration, so this is always OK.
  // INVALID_ARGUMENT for a bucket this rank does not have (the plan used another layout).
  absl::Status ExpectLaunched(int chunk, int bucket);

  // Ends the iteration: launches the buckets still due (all of them with overlap off), reports
  // every bucket that never fired, waits for every launched all-reduce and records its times. OK
  // when every bucket fired exactly once and reduced; otherwise the reduce error's code (e.g.
  // UNAVAILABLE, DEADLINE_EXCEEDED) or FAILED_PRECONDITION for counting errors, with the message
  // listing them (all of them are in errors()).
  absl::Status FinishIteration();

  // How many buckets (a prefix of buckets(), in launch order) have been launched this iteration,
  // and the handle of launched bucket `slot`'s all-reduce (valid until the next BeginIteration).
  int launched() const { return next_launch_; }
  CommHandle* handle(int slot) const { return handles_.at(slot).get(); }

  // Per bucket, in launch order, for the current or last finished iteration.
  const std::vector<BucketRecord>& records() const { return records_; }
  // Counting and reduce errors of the current or last finished iteration.
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  GradSync(const GradSyncOptions& options, Communicator& comm) : options_(options), comm_(comm) {}

  absl::Status Add(int slot, int count, const std::string& from);
  void LaunchDue();
  std::string Name(int slot) const;
  int SlotOf(int stage, int bucket) const;

  const GradSyncOptions options_;
  Communicator& comm_;
  core::Placement placement_;
  int rank_ = 0;
  std::vector<std::vector<model::ParamInfo>> params_;  // [chunk][param]
  std::vector<std::vector<int>> param_slot_;        // [chunk][param] -> slot (-1: none)
  std::vector<std::vector<int64_t>> param_offset_;  // [chunk][param] -> offset in its bucket
  std::vector<std::vector<int>> stage_slots_;       // [chunk] -> slots in layout order
  std::vector<BucketLayout> buckets_;               // by slot = launch order
  std::vector<torch::Tensor> buffers_;              // by slot
  std::vector<BucketRecord> records_;               // by slot
  std::vector<int> per_b_, per_w_;  // by slot: contributions of one B / one W (BW: both)
  std::vector<std::unique_ptr<CommHandle>> handles_;  // by slot
  std::vector<std::string> errors_;
  int next_launch_ = 0;
  bool in_iteration_ = false;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_GRAD_SYNC_GRAD_SYNC_H_
