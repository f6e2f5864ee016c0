// The worker's domain view of a job: what one rank runs, as the coordinator resolved it.
//
// The coordinator resolves every default of a job spec once (coordinator/spec_defaults.h) and
// assigns the resolved spec; the worker converts the assignment into these types once, on entry
// (FromAssignment in job_proto.h, the worker's only reader of worker.proto's job messages), and
// everything after that (job_runner, job_checkpoint, data_roots, plan_switch) works on them. No
// value here is a worker-side default: a field the coordinator resolves but the assignment lacks
// is refused at the edge, naming the field.
//
// Plain values, no protobuf: copyable, comparable in tests, cheap to build by hand.
#ifndef ZPIPE_WORKER_DAEMON_JOB_CONFIG_H_
#define ZPIPE_WORKER_DAEMON_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/plan.h"
#include "worker/executor/lr_schedule.h"
#include "worker/executor/train_enums.h"
#include "worker/model/gpt.h"
#include "worker/python/compile_mode.h"

namespace zpipe::worker {

// The kind of device a job's stages run on (job spec `device`).
enum class DeviceKind { kCpu, kCuda };

// Where the model's stages come from (job spec `model`); exactly one kind. A new kind of model
// is a new alternative here, converted in job_proto.cc and built in job_runner.cc's MakeStages.

// The built-in GPT decoder (model/gpt.h), cut into stages of whole layers.
struct GptSource {
  model::GptConfig config;
};

// Sleeping stages with the plan's per-stage costs (model/synthetic.h).
struct SyntheticSource {
  // One stage's costs, from the assignment (the plan's cost model, not a re-plan's measured one).
  struct StageCost {
    double forward_ms = 0;
    double backward_ms = 0;
    double weight_ms = 0;
    double activation_kb = 0;
    double params_mb = 0;
  };
  std::vector<StageCost> stage_costs;  // by stage; every stage of the plan has one
  int param_tensors = 0;               // per stage; 0 = one per 4 MB (synthetic.h)
  // Cost drift (model.synthetic.w_slowdown): from iteration `after` on, W takes `factor` x.
  struct Slowdown {
    int after_iteration = 0;
    double factor = 1;
  };
  std::optional<Slowdown> w_slowdown;
};

// A TorchScript file of blocks (model/torchscript.h), cut at `cuts` (S - 1 block indices).
struct TorchScriptSource {
  std::string path;  // a local file (artifact references are resolved before the edge)
  std::vector<int> cuts;
};

// An nn.Module built by a Python factory in the worker's embedded interpreter
// (worker/python/python_model.h), its blocks cut like a TorchScript model's.
struct PythonSource {
  std::string file;       // the .py file (a local path, like TorchScriptSource::path)
  std::string factory;    // a function of `file`; never empty (the edge fills "build_model")
  std::string args_json;  // its keyword arguments, a JSON object's text; "" = none
  std::vector<int> cuts;  // as TorchScriptSource::cuts
  python::CompileMode compile = python::CompileMode::kNone;  // how its blocks run
};

using ModelSource = std::variant<GptSource, SyntheticSource, TorchScriptSource, PythonSource>;

// The token file a job trains on (job spec `data`); absent = GPT's synthetic tokens.
struct TokenDataConfig {
  std::string path;
  std::string dtype;  // "uint16" or "uint32" (model/token_file.h checks it)
  std::optional<uint64_t> shuffle_seed;
};

// Evaluation on a second token file (job spec `eval`), in the data's dtype and seq_len.
struct EvalConfig {
  std::string path;
  int every = 0;    // iterations between evaluations, >= 1
  int batches = 0;  // fixed batches per evaluation, >= 1
};

struct TrainConfig {
  int iterations = 0;
  uint64_t seed = 0;
  Optimizer optimizer = Optimizer::kAdamW;
  double lr = 0;
  std::optional<LrSchedule> lr_schedule;  // absent = `lr` throughout
  double weight_decay = 0;
  // adam and adamw only (absent for sgd).
  std::optional<double> beta1, beta2, eps;
  double clip_grad_norm = 0;  // 0 = no clipping
  Precision precision = Precision::kFp32;
};

struct GradSyncConfig {
  double bucket_mb = 0;  // > 0
  bool overlap = true;
};

// Checkpointing (job spec `checkpoint`); absent when checkpoint.every is 0.
struct CheckpointConfig {
  std::string dir;           // empty = the working directory
  int every = 0;             // >= 1
  int keep = 0;              // 0 = keep all
  bool skip_errors = false;  // checkpoint.on_error: skip (else fail)
};

// What a job runs, from its spec: the part a profile request and an assignment share.
struct JobSettings {
  std::string name;      // spec.name: names the checkpoint folder
  std::string schedule;  // spec.schedule.kind, as recorded in checkpoint manifests
  ModelSource model;
  // The model spec as job.proto JSON (field names as in the .proto, every primitive printed):
  // checkpoint manifests record it, and a resume compares it field by field.
  std::string model_json;
  DeviceKind device = DeviceKind::kCpu;
  int microbatch_size = 0;  // >= 1
  // L, tokens per sample: data.seq_len, or the GPT model's without a data section; 0 for a
  // synthetic model.
  int seq_len = 0;
  std::optional<TokenDataConfig> data;
  std::optional<EvalConfig> eval;
  TrainConfig train;
  GradSyncConfig grad_sync;
  std::optional<CheckpointConfig> checkpoint;
};

// Where this rank sits in the job: p x d ranks, global rank = data_rank * p + pipeline_rank.
struct RankPosition {
  int pipeline_rank = 0;
  int pipeline_size = 1;
  int data_rank = 0;
  int data_size = 1;
  int global_rank = 0;
};

// One rank's assignment: the job, this rank's place in it, and the plan to run.
struct JobConfig {
  std::string job_id;
  int attempt = 0;
  RankPosition rank;
  // Every rendezvous key of this attempt starts with it (the communicator, checkpoint decisions,
  // plan-switch answers).
  std::string rendezvous_prefix;
  core::Plan plan;  // the lowered plan of every pipeline rank; `rank.pipeline_rank` is in it
  int plan_version = 0;
  int start_iteration = 0;
  JobSettings settings;
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_CONFIG_H_
