// Domain types of the coordinator: job specs, job records, workers and measurements.
//
// These mirror the zpipe.v1 proto messages but carry no protobuf; *_proto.cc adapters convert.
// Everything behind the gRPC services (job manager, store, tracker) works on these.
#ifndef ZPIPE_COORDINATOR_DOMAIN_H_
#define ZPIPE_COORDINATOR_DOMAIN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "spec/gpt_config.h"

namespace zpipe::coordinator {

enum class DeviceKind { kCpu, kCuda };
absl::string_view DeviceKindName(DeviceKind kind);  // "cpu", "cuda"

// checkpoint.on_error (CheckpointOnError in job.proto); kUnset = fail.
enum class CheckpointOnError { kUnset, kFail, kSkip };

// The GPT model section is the type the worker builds stages from (spec/gpt_config.h), with the
// one validator both sides use.
using spec::GptConfig;

// Sizes are per pipeline rank (1/p of the model); see SyntheticModel in job.proto.
struct SyntheticConfig {
  double forward_ms = 0;
  double backward_ms = 0;
  double weight_ms = 0;
  double activation_kb = 0;
  double params_mb = 0;
  int param_tensors = 0;
  // w_slowdown: from iteration w_slowdown_after on, W takes w_slowdown_factor x weight_ms
  // (factor 0 = no slowdown).
  int w_slowdown_after = 0;
  double w_slowdown_factor = 0;
  friend bool operator==(const SyntheticConfig&, const SyntheticConfig&) = default;
};

// A user's TorchScript nn.Sequential (TorchScriptModel in job.proto).
struct TorchScriptConfig {
  std::string path;
  std::vector<int> cuts;  // empty = balanced by measured cost
  friend bool operator==(const TorchScriptConfig&, const TorchScriptConfig&) = default;
};

// A user's nn.Module built by a Python factory (PythonModel in job.proto); cut like TorchScript.
struct PythonConfig {
  std::string file;
  std::string factory;  // "" = build_model
  std::string args;     // JSON object text; "" = no arguments
  std::vector<int> cuts;  // empty = balanced by measured cost
  std::string compile{};  // "none", "trace" or "script"; "" = none
  friend bool operator==(const PythonConfig&, const PythonConfig&) = default;
};

// A token file (DataSpec in job.proto); empty path = no data section.
struct DataConfig {
  std::string path;
  std::string dtype;  // "" = uint16
  std::optional<uint64_t> shuffle_seed;
  int seq_len = 0;  // 0 = the GPT model's
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct EvalConfig {
  std::string path;  // empty = no evaluation
  int every = 0;
  int batches = 0;  // 0 = 4
  friend bool operator==(const EvalConfig&, const EvalConfig&) = default;
};

// Optimizer and schedule settings beyond lr (TrainSpec in job.proto); unset = defaults there.
struct TrainSettings {
  std::optional<double> weight_decay;
  std::vector<double> betas;
  std::optional<double> eps;
  std::optional<double> clip_grad_norm;
  int warmup = 0;
  std::string decay;  // "" = constant
  double min_lr = 0;
  std::string precision;  // "" = fp32
  friend bool operator==(const TrainSettings&, const TrainSettings&) = default;
};

// A job spec (zpipe.v1.JobSpec). As submitted, "0 / empty / unset" fields mean their defaults
// (the comments below); JobManager stores and serves it resolved (spec_defaults.h), so a job's
// record shows what runs. Field meanings and ranges: proto/zpipe/v1/job.proto.
struct JobSpec {
  std::string name;
  std::variant<std::monostate, GptConfig, SyntheticConfig, TorchScriptConfig, PythonConfig> model;
  int pipeline = 0;
  int data = 0;  // 0 = 1
  std::string schedule;
  std::optional<double> memory_limit;  // M_F units; nullopt = auto
  int chunks = 0;
  int replan_every = 0;                    // 0 = no re-planning
  std::optional<double> replan_threshold;  // nullopt = kDefaultReplanThreshold
  std::string recompute;                   // "" = off; "off", "auto", "all" (RecomputePolicy)
  std::optional<double> search_budget;     // seconds; nullopt = kDefaultSearchBudget, 0 = greedy
  std::optional<bool> polish;              // nullopt = kDefaultPolish (core::PlanRequest::polish)
  int microbatches = 0;
  int microbatch_size = 0;
  int iterations = 0;
  std::string optimizer;  // "" = adamw
  double lr = 0;
  uint64_t seed = 0;
  double bucket_mb = 0;         // 0 = kDefaultBucketMb
  std::optional<bool> overlap;  // nullopt = kDefaultOverlap
  int checkpoint_every = 0;
  std::string checkpoint_dir;
  int checkpoint_keep = 0;  // 0 = keep all
  CheckpointOnError checkpoint_on_error = CheckpointOnError::kUnset;
  DeviceKind device = DeviceKind::kCpu;
  DataConfig data_file;
  EvalConfig eval;
  TrainSettings train;
  // restart (RestartSpec in job.proto): 0 = a lost rank fails the job.
  int max_restarts = 0;
  std::string restart_backoff;  // "" = 2s
  // labels (JobSpec.labels in job.proto): for finding jobs, not for scheduling.
  std::map<std::string, std::string> labels;

  int data_parallel() const { return data == 0 ? 1 : data; }
  int world_size() const { return pipeline * data_parallel(); }
  // Defaults that ResolveSpecDefaults (spec_defaults.h) writes into a stored spec and that the
  // accessors below give a spec not resolved yet: defined once, here.
  static constexpr double kDefaultBucketMb = 25;
  static constexpr bool kDefaultOverlap = true;
  static constexpr double kDefaultReplanThreshold = 0.01;
  // `zpipe plan --budget`'s default, so that a job runs the plan `zpipe plan` shows. A submit
  // waits for its plan, and a restarted coordinator makes every unfinished job's plan again
  // (docs/design.md, "Planning time"): hence a smaller limit than zpipe plan's.
  static constexpr double kDefaultSearchBudget = 1;
  static constexpr double kMaxSearchBudget = 10;
  static constexpr bool kDefaultPolish = true;  // as `zpipe plan`
  double bucket_mb_or_default() const { return bucket_mb == 0 ? kDefaultBucketMb : bucket_mb; }
  bool overlap_or_default() const { return overlap.value_or(kDefaultOverlap); }
  double replan_threshold_or_default() const {
    return replan_threshold.value_or(kDefaultReplanThreshold);
  }
  double search_budget_or_default() const { return search_budget.value_or(kDefaultSearchBudget); }
  bool polish_or_default() const { return polish.value_or(kDefaultPolish); }

  friend bool operator==(const JobSpec&, const JobSpec&) = default;
};

// kRestarting: a rank was lost and spec.max_restarts allows another attempt (job.proto).
enum class JobState {
  kPending,
  kScheduling,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kRestarting
};
absl::string_view JobStateName(JobState state);  // "PENDING", ...
bool IsTerminal(JobState state);
inline constexpr JobState kAllJobStates[] = {
    JobState::kPending, JobState::kScheduling, JobState::kRunning,   JobState::kSucceeded,
    JobState::kFailed,  JobState::kCancelled,  JobState::kRestarting};

// The cuts of a model made of blocks a worker measures and cuts (TorchScript or Python): the
// spec's, empty = balanced by measured cost. nullptr for GPT and synthetic models.
const std::vector<int>* BlockModelCuts(const JobSpec& spec);
std::vector<int>* MutableBlockModelCuts(JobSpec& spec);
// The spec field such a model's errors name: "model.python" or "model.torchscript".
absl::string_view BlockModelField(const JobSpec& spec);

// The restart backoff of `spec` (restart.backoff; "" = 2s); InvalidArgument naming the field.
absl::StatusOr<absl::Duration> RestartBackoff(const struct JobSpec& spec);

// Which worker holds one rank of a scheduled job.
struct RankSlot {
  int pipeline_rank = 0;
  int data_rank = 0;
  std::string worker_name;
  std::string host;
  int device_index = 0;
  friend bool operator==(const RankSlot&, const RankSlot&) = default;
};

// One rank's measurements of one iteration (RankIterationStats in job.proto).
struct RankStats {
  int pipeline_rank = 0;
  int data_rank = 0;
  double duration_s = 0;
  double busy_s = 0;
  double idle_s = 0;
  double forward_s = 0;
  double backward_s = 0;
  double weight_s = 0;
  double bubble_ratio = 0;
  double reduce_s = 0;
  double exposed_reduce_s = 0;
  double p2p_wait_s = 0;
  double tokens = 0;
  double checkpoint_stall_s = 0;
  std::string checkpoint_error;  // a skipped checkpoint write (checkpoint.on_error: skip)
  int plan_version = 0;          // the plan the rank ran the iteration with
  double step_s = 0;             // optimizer step after the last reduction
  double overlapped_step_s = 0;  // optimizer stepping of buckets during the iteration
  friend bool operator==(const RankStats&, const RankStats&) = default;
};

struct IterationSummary {
  int iteration = 0;
  double duration_s = 0;
  std::optional<double> loss;
  std::optional<double> eval_loss;  // spec.eval: measured after this iteration
  double bubble_rate = 0;
  double predicted_bubble_rate = 0;
  // The plan re-simulated at this iteration's measured costs (measured_bubble.h), when computed.
  std::optional<double> predicted_bubble_measured_costs;
  double reduce_total_s = 0;
  double reduce_exposed_s = 0;
  std::vector<RankStats> ranks;  // by global rank
  friend bool operator==(const IterationSummary&, const IterationSummary&) = default;
};

// Measured cost of one block of a TorchScript model (ProfileResult in worker.proto).
struct BlockProfileData {
  double forward_ms = 0;
  double backward_ms = 0;
  double weight_ms = 0;
  double activation_bytes = 0;
  double param_bytes = 0;
};

// How a TorchScript model is cut into stages (ModelLayout in job.proto).
struct ModelLayout {
  struct Stage {
    int stage = 0;
    int first_block = 0;
    int end_block = 0;
    double forward_ms = 0, backward_ms = 0, weight_ms = 0;
    double activation_kb = 0;  // the stage's output per microbatch
    double params_mb = 0;
  };
  std::string source;  // "spec", "measured", "checkpoint"
  std::vector<int> cuts;
  std::vector<Stage> stages;
  int blocks = 0;
};

// A stage's compute costs as a plan was generated from them, ms per microbatch (PlanStageCost).
struct PlanStageCost {
  int stage = 0;
  double forward_ms = 0, backward_ms = 0, weight_ms = 0;
  friend bool operator==(const PlanStageCost&, const PlanStageCost&) = default;
};

// One scheduled attempt of a job (JobAttempt in job.proto).
struct JobAttemptRecord {
  int attempt = 0;
  absl::Time start_time = absl::InfinitePast();
  absl::Time end_time = absl::InfinitePast();  // InfinitePast while it runs
  std::vector<std::string> workers;            // by global rank
  std::string end_reason;
  int iterations_done = 0;   // the job's, when the attempt ended
  int start_iteration = -1;  // its first reported iteration; -1 before one
  friend bool operator==(const JobAttemptRecord&, const JobAttemptRecord&) = default;
};

// What the store keeps about a job.
struct JobRecord {
  std::string id;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;
  absl::Time create_time = absl::InfinitePast();
  absl::Time start_time = absl::InfinitePast();  // InfinitePast = unset
  absl::Time end_time = absl::InfinitePast();
  int64_t submit_order = 0;  // FIFO position among all jobs ever submitted
  int attempt = 0;
  std::vector<RankSlot> ranks;  // by global rank; empty while PENDING
  uint64_t last_sequence = 0;   // last WatchJob event sequence issued
  std::optional<IterationSummary> latest_summary;
  int iterations_done = 0;
  // The name of the token it was submitted with (auth.h); empty when the coordinator had none.
  std::string submitted_by;
  // TorchScript models: the cuts the job runs with, once known (not persisted: after a
  // coordinator restart a running job shows none).
  std::optional<ModelLayout> layout;
  int restarts = 0;                        // automatic restarts so far
  std::vector<JobAttemptRecord> attempts;  // oldest first
  // Re-planning (schedule.replan_every): the plan running now (0 = the spec's) and the per-stage
  // costs it was generated from (empty for version 0). Persisted: a restarted coordinator
  // regenerates the same plan from them.
  int plan_version = 0;
  std::vector<PlanStageCost> plan_costs;
};

enum class WorkerState { kIdle, kBusy, kDead };
absl::string_view WorkerStateName(WorkerState state);  // "idle", "busy", "dead"
inline constexpr WorkerState kAllWorkerStates[] = {WorkerState::kIdle, WorkerState::kBusy,
                                                   WorkerState::kDead};

// One CUDA device a worker's CUDA runtime lists (CudaDevice in worker.proto).
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  uint64_t total_memory_bytes = 0;
  friend bool operator==(const CudaDeviceInfo&, const CudaDeviceInfo&) = default;
};

// What a worker process can run (WorkerCapabilities in worker.proto, which gives each field's
// meaning); worker_match.h decides from it which jobs the worker may take.
struct WorkerCapabilities {
  std::string libtorch_version;
  bool torch_cuda = false;
  int cuda_device_count = 0;
  std::string cuda_runtime_version;
  bool nccl = false;
  std::string nccl_version;
  std::vector<CudaDeviceInfo> devices;
  std::string probe_error;
  friend bool operator==(const WorkerCapabilities&, const WorkerCapabilities&) = default;
};

struct WorkerRegistration {
  std::string name;
  DeviceKind device_kind = DeviceKind::kCpu;
  int device_index = 0;
  std::string host;
  uint64_t memory_bytes = 0;
  std::string version;
  // A job still being executed from a previous session; empty when idle.
  std::string running_job_id;
  int running_pipeline_rank = 0;
  int running_data_rank = 0;
  // The worker already finished every iteration of that rank (its RankFinished may be lost).
  bool running_job_finished = false;
  // The worker's rank of that job failed while the coordinator was away (its RankFailure
  // follows on the session).
  bool running_job_failed = false;
  // Random per worker process (worker.proto "Identity"); empty from workers that send none.
  std::string instance_id;
  // nullopt from workers older than capability reporting (offered CPU jobs only).
  std::optional<WorkerCapabilities> capabilities;
};

// A worker as the registry sees it.
struct WorkerInfo {
  WorkerRegistration registration;
  std::string worker_id;
  WorkerState state = WorkerState::kIdle;
  bool connected = false;  // has a live Session stream
  std::string job_id;      // busy only
  int pipeline_rank = 0;
  int data_rank = 0;
  absl::Time register_time = absl::InfinitePast();
  absl::Time last_seen = absl::InfinitePast();
  std::string reason;  // dead only
  // The job its latest heartbeat (or registration) says it still runs; "" = none.
  std::string reported_job;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_DOMAIN_H_
