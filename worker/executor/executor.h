// Executor: runs one pipeline rank's plan, one iteration at a time.
//
// For every action of the rank's (lowered) plan, in order:
//   F(s,i)      input from the data (stage 0), the local hand-over (previous stage on this rank:
//               the V turn-around) or a posted receive; runs the stage; keeps the output for its
//               SEND or the local consumer.
//   B(s,i)      output gradient from the loss (last stage, scaled 1/m by the stage), the local
//               hand-over or a posted receive; runs the input backward; keeps the input gradient.
//   W(s,i)      runs the queued weight-gradient work.   BW(s,i): B then W.
//   R(s,i)      the forward again (Stage::Recompute); the plan has one for (s,i), so its F ran
//               as Stage::ForwardAndForget and kept only its input. Busy time, not forward_s.
//   SEND_*      hands the tensor to the communicator; never blocks.
//   RECV_*      posted ahead: the executor keeps the next `recv_lookahead` receives of the plan
//               posted, in plan order (so the pairwise order rule holds); the consumer waits.
//   REDUCE      the plan's predicted launch point of a bucket's all-reduce; the launch itself is
//               driven by the gradient-sync countdown (GradSyncDriver), which must have fired.
// After the last action it waits for every send and reduction, clips the gradients by their
// global norm (across pipeline ranks; DP replicas hold identical averaged gradients), steps the
// optimizer, and returns the iteration's measurements. (Without clipping, a data-parallel rank
// steps each bucket's parameters during the iteration instead, once the bucket has reduced and
// its chunk is done: ExecutorConfig::overlap_step.) The ActionSink gets every compute action's
// start and end as it completes, each send (handed to the communicator -> complete) and receive
// (posted -> data arrived) of the plan once it is over and its consumer has it, and each
// reduction of the iteration (the all-reduce on the transport) once all of them are done.
//
// Thread-safety: one thread drives an Executor. Errors (communication failures and timeouts,
// stage errors) come back as absl::Status; the executor is then unusable.
#ifndef ZPIPE_WORKER_EXECUTOR_EXECUTOR_H_
#define ZPIPE_WORKER_EXECUTOR_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "worker/comm/communicator.h"
#include "worker/executor/lr_schedule.h"
#include "worker/executor/train_enums.h"
#include "worker/model/data.h"
#include "worker/model/stage.h"

namespace zpipe::worker {

using SteadyTime = std::chrono::steady_clock::time_point;

struct ExecutorConfig {
  int microbatch_size = 1;
  int recv_lookahead = 4;                      // receives kept posted ahead of the current action
  absl::Duration timeout = absl::Seconds(60);  // per wait on a receive, send or reduction
  Optimizer optimizer = Optimizer::kAdamW;
  double lr = 3e-4;
  // Per-iteration learning rate; unset = `lr` throughout.
  std::optional<LrSchedule> lr_schedule;
  // AdamW's decoupled decay; for adam and sgd an L2 term (torch's meaning of weight_decay).
  // Unset = torch's defaults: 0.01 for adamw, 0 for adam and sgd.
  std::optional<double> weight_decay;
  double weight_decay_or_default() const {
    return weight_decay.value_or(optimizer == Optimizer::kAdamW ? 0.01 : 0.0);
  }
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  // Clip the global gradient norm (every stage of every pipeline rank) to this, with
  // torch.nn.utils.clip_grad_norm_ semantics; <= 0 = no clipping (and no norm exchange).
  double max_grad_norm = 1.0;
  // With data parallelism, no clipping and a CPU device: step each gradient bucket's parameters
  // as soon as its all-reduce completes and its chunk's last compute action of the iteration has
  // ended, on a thread of its own, rather than all of them after the last reduction
  // (bucket_step.h). Bit-identical either way; false is the baseline.
  bool overlap_step = true;
  // When set and true, waits give up with CANCELLED (checked every 50 ms); for job cancels.
  const std::atomic<bool>* cancelled = nullptr;
  // Where the stages compute (their parameters, optimizer state and gradients live there). On a
  // CUDA device compute actions are timed with CUDA events (device_timer.h); tensors crossing to
  // a communicator on another device (the TCP streams with CUDA stages) are staged through its device.
  torch::Device device = torch::kCPU;
  // kBf16: forward passes under bf16 autocast, with fp32 parameters (master weights), fp32
  // optimizer state and fp32 gradients (so gradient buckets reduce in fp32).
  Precision precision = Precision::kFp32;
  // When set, every F seeds its stage's generators with model::ForwardSeed(forward_seed,
  // iteration, data rank, stage, microbatch) first: dropout masks follow the job's seed and the
  // sample, so a run is reproducible and draws the same masks whatever the schedule (for the
  // same stages). Unset: forwards draw on from wherever the process's generators stand.
  std::optional<uint64_t> forward_seed;
};

// One executed action: compute (F, B, W, BW), a send or receive of the plan (SEND_* / RECV_*, as
// the plan names it), or a reduction (`REDUCE chunkC bucketK`). Times are wall-clock seconds since
// the Unix epoch.
struct ActionRecord {
  int iteration = 0;
  core::Action action;
  double start_s = 0;
  double end_s = 0;
};

// Receives executed actions: compute actions in completion order, sends, receives and reductions
// once they are over (see the file comment). Called on the executor's thread; must not block (a
// queue).
class ActionSink {
 public:
  virtual ~ActionSink() = default;
  virtual void OnAction(const ActionRecord& record) = 0;
};

// A completed reduction, for overlap accounting.
struct ReduceInterval {
  int chunk = 0;
  int bucket = 0;
  SteadyTime launch;
  SteadyTime start;
  SteadyTime end;
};

// Gradient sync as the executor drives it; implemented over worker/grad_sync.
class GradSyncDriver {
 public:
  virtual ~GradSyncDriver() = default;
  virtual absl::Status BeginIteration(int iteration) = 0;
  // After every compute action, with the action. Contributions are counted as they land, during
  // the action (the stages' gradient observers; a bucket whose count reaches zero launches right
  // then, mid-W); this reports any counting error the action caused.
  virtual absl::Status OnCompute(const core::Action& action) = 0;
  // At a REDUCE action of the plan: the bucket should have been launched by now.
  virtual absl::Status OnReduceAction(int chunk, int bucket) = 0;
  // Waits for every reduction of the iteration; errors for a bucket that over- or under-counted.
  virtual absl::StatusOr<std::vector<ReduceInterval>> FinishIteration() = 0;

  // A bucket whose all-reduce has been launched: the stage it belongs to, its parameters, and
  // the all-reduce's handle (valid until the next BeginIteration). Once the handle completes OK
  // the parameters' gradients are final for the iteration.
  struct Launched {
    int stage = 0;
    std::vector<torch::Tensor> params;
    CommHandle* reduced = nullptr;
  };
  // The buckets launched since the last call, in launch order (the executor steps them as they
  // reduce: bucket_step.h). A driver that does not say returns none, and every parameter is
  // stepped after the iteration's last reduction.
  virtual std::vector<Launched> TakeLaunched() { return {}; }
};

struct IterationSummary {
  int iteration = 0;
  double duration_s = 0;  // first action start to last action or reduction end
  double busy_s = 0;
  double idle_s = 0;
  double forward_s = 0;
  double backward_s = 0;  // B and BW
  double weight_s = 0;    // W
  double bubble_ratio = 0;
  double reduce_s = 0;
  double exposed_reduce_s = 0;
  double p2p_wait_s = 0;
  double tokens = 0;           // tokens entering stage 0 on this rank
  std::optional<double> loss;  // mean over microbatches, on the rank of the last stage
  double grad_norm = 0;        // global norm before clipping
  // The optimizer step after the last reduction (with overlap_step: what was left of it, the
  // wait for the last buckets' steps included).
  double step_s = 0;
  double overlapped_step_s = 0;  // time spent stepping buckets on the stepper's thread
  int overlapped_buckets = 0;    // buckets stepped during the iteration (bucket_step.h)
  std::vector<ReduceInterval> reductions;
};

class Executor {
 public:
  // `plan`: the whole lowered plan (every pipeline rank; REDUCE actions optional).
  // `stages[c]`: this rank's stage of local chunk c (placement.StageOf(rank, c)).
  // `data`: token data for GPT stages; nullptr for synthetic stages.
  // `grad_sync`, `sink`: optional. `comm`, `data`, `grad_sync`, `sink` must outlive the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> Make(
      const core::Plan& plan, int pipeline_rank, int data_rank, const ExecutorConfig& config,
      std::vector<std::unique_ptr<model::Stage>> stages, Communicator& comm,
      const model::TokenData* data, GradSyncDriver* grad_sync, ActionSink* sink);

  ~Executor();

  absl::StatusOr<IterationSummary> RunIteration(int iteration);

  // Between iterations: runs `plan` from the next iteration on (a re-plan). It must have the
  // running plan's placement, stages and microbatches (only the order of actions may differ);
  // `grad_sync` (optional, like Make's) replaces the driver, whose launch order came from the old
  // plan. InvalidArgument when the shape differs.
  absl::Status SetPlan(const core::Plan& plan, GradSyncDriver* grad_sync);

  // Evaluation between iterations: batch(k) for k < batches goes forward through every stage of
  // the pipeline (activations over the communicator, no gradients kept), one batch at a time.
  // Every pipeline rank of a replica calls it with the same batches; the rank holding the last
  // stage returns the mean loss, the others nullopt. `batch` is called on ranks holding stage 0
  // or the last stage.
  absl::StatusOr<std::optional<double>> Evaluate(
      int batches, const std::function<model::TokenBatch(int k)>& batch);

  const std::vector<std::unique_ptr<model::Stage>>& stages() const;
  // The optimizer over every stage's parameters; null when the stages have none. For saving and
  // restoring its state (worker/executor/checkpoint.h), between iterations only.
  torch::optim::Optimizer* optimizer() const;

 private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_EXECUTOR_EXECUTOR_H_
