#include "worker/daemon/job_runner.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/plan.h"
#include "util/log.h"
#include "worker/comm/factory/communicator_factory.h"
#include "worker/daemon/block_model_source.h"
#include "worker/daemon/job_checkpoint.h"
#include "worker/daemon/plan_switch.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/executor/executor.h"
#include "worker/executor/grad_sync_driver.h"
#include "worker/model/block_model.h"
#include "worker/model/block_profile.h"
#include "worker/model/gpt.h"
#include "worker/model/synthetic.h"
#include "worker/model/token_file.h"
#include "worker/model/torch_compat.h"

namespace zpipe::worker {
namespace {

using Stages = std::vector<std::unique_ptr<model::Stage>>;

// ------------------------------------------------------------------------------------ stages

// Options of the stage this rank runs as local chunk `chunk` on `device`.
model::StageOptions StageOptionsFor(const JobConfig& job, int chunk, torch::Device device) {
  model::StageOptions so;
  so.device = device;
  so.stage = job.plan.placement.StageOf(job.rank.pipeline_rank, chunk);
  so.num_stages = job.plan.num_stages();
  so.num_microbatches = job.plan.num_microbatches;
  so.seed = job.settings.train.seed;
  return so;
}

// A TorchScript or Python model's stages (block_model_source.h).
absl::StatusOr<Stages> MakeBlockModelStages(const JobConfig& job, torch::Device device) {
  const JobSettings& s = job.settings;
  auto loaded = LoadBlockModel(s.model, s.train.seed, s.seq_len, s.microbatch_size);
  if (!loaded.ok()) return loaded.status();
  auto bounds = model::StageBoundaries(*BlockModelCuts(s.model), (*loaded)->num_blocks(),
                                       job.plan.num_stages(), BlockModelField(s.model));
  if (!bounds.ok()) return bounds.status();
  Stages stages;
  for (int c = 0; c < job.plan.placement.chunks_per_rank(); ++c) {
    const model::StageOptions so = StageOptionsFor(job, c, device);
    const int begin = (*bounds)[so.stage], end = (*bounds)[so.stage + 1];
    auto stage = model::MakeBlockStage(*loaded, begin, end, so);
    if (!stage.ok()) return stage.status();
    if (model::FusedBackward(**stage)) {
      Log(
          absl::StrFormat("job %s stage %d (blocks %d..%d): no B/W split found in its autograd "
                          "graph; its backward runs whole in B",
                          job.job_id, so.stage, begin, end - 1));
    }
    stages.push_back(*std::move(stage));
  }
  return stages;
}

// `iteration`: the iteration running, for cost drift (w_slowdown).
absl::StatusOr<std::unique_ptr<model::Stage>> MakeSyntheticStage(
    const SyntheticSource& source, const model::StageOptions& so,
    const std::atomic<int>* iteration) {
  const SyntheticSource::StageCost& cost = source.stage_costs.at(so.stage);  // edge-checked
  model::SyntheticStageConfig sc;
  sc.forward_ms = cost.forward_ms;
  sc.backward_ms = cost.backward_ms;
  sc.weight_ms = cost.weight_ms;
  sc.activation_kb = cost.activation_kb;
  sc.params_mb = cost.params_mb;
  sc.param_tensors = source.param_tensors;
  if (source.w_slowdown) {
    sc.iteration = iteration;
    sc.w_slowdown_after = source.w_slowdown->after_iteration;
    sc.w_slowdown_factor = source.w_slowdown->factor;
  }
  return model::MakeSyntheticStage(sc, so);
}

// This rank's stages, one per local chunk. `iteration`: see MakeSyntheticStage.
absl::StatusOr<Stages> MakeStages(const JobConfig& job, torch::Device device,
                                  const std::atomic<int>* iteration) {
  const ModelSource& source = job.settings.model;
  if (BlockModelCuts(source) != nullptr) return MakeBlockModelStages(job, device);
  Stages stages;
  for (int c = 0; c < job.plan.placement.chunks_per_rank(); ++c) {
    const model::StageOptions so = StageOptionsFor(job, c, device);
    absl::StatusOr<std::unique_ptr<model::Stage>> stage =
        absl::InternalError("no stage builder for this kind of model");
    if (const auto* gpt = std::get_if<GptSource>(&source)) {
      stage = model::MakeGptStage(gpt->config, so);
    } else if (const auto* synthetic = std::get_if<SyntheticSource>(&source)) {
      stage = MakeSyntheticStage(*synthetic, so, iteration);
    }
    if (!stage.ok()) return stage.status();
    stages.push_back(*std::move(stage));
  }
  return stages;
}

// -------------------------------------------------------------------------------------- data

// The tokens a rank feeds its stages and evaluates on.
struct JobData {
  std::unique_ptr<model::TokenFileData> file;  // data.path, on ranks of the first or last stage
  std::optional<model::TokenFileEval> eval;    // eval.path, likewise
  std::optional<model::SyntheticTokenData> synthetic;  // GPT without a data section

  // What the executor reads; null on ranks that read no data.
  const model::TokenData* tokens() const {
    if (file != nullptr) return file.get();
    return synthetic ? &*synthetic : nullptr;
  }
};

// `status` with "what: " before its message, and `code` instead of its own when given.
absl::Status Named(absl::string_view what, const absl::Status& status,
                   std::optional<absl::StatusCode> code = std::nullopt) {
  return absl::Status(code.value_or(status.code()), absl::StrCat(what, ": ", status.message()));
}

// The vocabulary token ids must stay below: the GPT model's, or a block model's logits;
// 0 when unknown.
int64_t Vocab(const JobConfig& job, const Stages& stages) {
  if (const auto* gpt = std::get_if<GptSource>(&job.settings.model)) return gpt->config.vocab;
  return model::BlockModelVocab(stages);
}

absl::StatusOr<std::unique_ptr<model::TokenFileData>> OpenTrainData(const JobConfig& job,
                                                                    int64_t vocab) {
  const TokenDataConfig& data = *job.settings.data;
  model::TokenFileData::Options o;
  o.path = data.path;
  o.dtype = data.dtype;
  o.seq_len = job.settings.seq_len;
  o.data_size = job.rank.data_size;
  o.microbatches = job.plan.num_microbatches;
  o.microbatch_size = job.settings.microbatch_size;
  o.shuffle_seed = data.shuffle_seed;
  auto file = model::TokenFileData::Make(o);
  if (!file.ok()) return Named("data", file.status());
  if (vocab > 0) {
    if (absl::Status st = (*file)->file().ValidateVocab(vocab); !st.ok()) {
      return Named("data", st, absl::StatusCode::kInvalidArgument);
    }
  }
  return file;
}

absl::StatusOr<model::TokenFileEval> OpenEvalData(const JobConfig& job, int64_t vocab) {
  const JobSettings& s = job.settings;
  auto eval = model::TokenFileEval::Make(s.eval->path, s.data->dtype, s.seq_len, s.microbatch_size,
                                         s.eval->batches);
  if (!eval.ok()) return Named("eval", eval.status());
  if (vocab > 0) {
    if (absl::Status st = eval->file().ValidateVocab(vocab); !st.ok()) {
      return Named("eval", st, absl::StatusCode::kInvalidArgument);
    }
  }
  return eval;
}

// Into `out`: a token file when the job has one (read by the ranks holding stage 0 or the last
// stage), else GPT's synthetic tokens.
absl::Status OpenData(const JobConfig& job, const Stages& stages, JobData& out) {
  const core::Plan& plan = job.plan;
  const int rank = job.rank.pipeline_rank;
  const bool reads_data =
      plan.placement.RankOf(0) == rank || plan.placement.RankOf(plan.num_stages() - 1) == rank;
  const JobSettings& s = job.settings;
  if (s.data && reads_data) {
    const int64_t vocab = Vocab(job, stages);
    auto file = OpenTrainData(job, vocab);
    if (!file.ok()) return file.status();
    out.file = *std::move(file);
    if (s.eval) {
      auto eval = OpenEvalData(job, vocab);
      if (!eval.ok()) return eval.status();
      out.eval.emplace(*std::move(eval));
    }
  }
  const auto* gpt = std::get_if<GptSource>(&s.model);
  if (gpt != nullptr && !s.data) {
    auto tokens = model::SyntheticTokenData::Make(s.train.seed, gpt->config.vocab,
                                                  gpt->config.seq_len, s.microbatch_size);
    if (!tokens.ok()) return tokens.status();
    out.synthetic.emplace(*std::move(tokens));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- the training

GradSyncOptions GradSyncOptionsFor(const JobConfig& job, const JobRunnerOptions& options) {
  GradSyncOptions gso;
  gso.bucket_bytes = static_cast<int64_t>(job.settings.grad_sync.bucket_mb * (1 << 20));
  gso.overlap = job.settings.grad_sync.overlap;
  gso.wait_timeout = options.comm_timeout;
  return gso;
}

ExecutorConfig ExecutorConfigFor(const JobConfig& job, torch::Device device,
                                 const JobRunnerOptions& options,
                                 const std::atomic<bool>& cancelled) {
  const TrainConfig& train = job.settings.train;
  ExecutorConfig config;
  config.microbatch_size = job.settings.microbatch_size;
  config.timeout = options.comm_timeout;
  config.optimizer = train.optimizer;
  config.lr = train.lr;
  config.lr_schedule = train.lr_schedule;
  config.weight_decay = train.weight_decay;
  if (train.beta1) config.beta1 = *train.beta1;
  if (train.beta2) config.beta2 = *train.beta2;
  if (train.eps) config.eps = *train.eps;
  config.max_grad_norm = train.clip_grad_norm;
  config.device = device;
  config.precision = train.precision;
  config.forward_seed = train.seed;
  config.cancelled = &cancelled;
  return config;
}

// Why this job cannot run on this worker, or OK: a path outside the data roots, or a CUDA job
// on a worker that cannot run one (never silently on the CPU).
absl::Status CheckJobCanRun(const JobConfig& job, const JobRunnerOptions& options) {
  if (options.data_roots == nullptr) return absl::InternalError("RunJob: no data roots");
  if (absl::Status st = options.data_roots->CheckJob(job.settings); !st.ok()) return st;
  if (job.settings.device == DeviceKind::kCuda) return CanRunCudaJobs(options);
  return absl::OkStatus();
}

torch::Device DeviceFor(const JobConfig& job, const JobRunnerOptions& options) {
  if (job.settings.device != DeviceKind::kCuda) return torch::Device(torch::kCPU);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.device_index));
}

// One rank's run of a job: built by Prepare, then Resume, Train and Finish, in that order.
// Members are declared so that everything the executor points to outlives it.
class RankRun {
 public:
  RankRun(const JobConfig& job, KeyValueStore& rendezvous, JobReporter& reports,
          const JobRunnerOptions& options, const std::atomic<bool>& cancelled)
      : job_(job),
        rendezvous_(rendezvous),
        reports_(reports),
        options_(options),
        cancelled_(cancelled),
        device_(DeviceFor(job, options)),
        running_iteration_(job.start_iteration),
        grad_sync_options_(GradSyncOptionsFor(job, options)) {}

  // Stages, checkpointer, data, communicator, gradient sync and executor.
  absl::Status Prepare();
  // The iteration to start at: the assignment's, or later when resuming from a checkpoint.
  absl::StatusOr<int> Resume();
  // Iterations [start, iterations), each reported; re-plans are taken as they arrive.
  absl::Status Train(int start);
  // Waits for the last checkpoint write and reports that the rank finished.
  absl::Status Finish();

 private:
  absl::Status Connect();
  absl::Status MakeExecutor(Stages stages);
  // Before iteration `it`: switches to a re-plan every rank agreed to run from `it` on.
  absl::Status SwitchPlanIfDue(int it);
  absl::Status RunIteration(int it);
  // After iteration `it`: a checkpoint when due (and the last one after the last iteration).
  absl::Status CheckpointAfter(int it, IterationReport& report);
  // After iteration `it`: the eval loss when an evaluation is due.
  absl::Status EvaluateAfter(int it, IterationReport& report);

  const JobConfig& job_;
  KeyValueStore& rendezvous_;
  JobReporter& reports_;
  const JobRunnerOptions& options_;
  const std::atomic<bool>& cancelled_;
  const torch::Device device_;
  std::atomic<int> running_iteration_;           // read by synthetic stages (cost drift)
  std::unique_ptr<JobCheckpointer> checkpoint_;  // null when the job does not checkpoint
  JobData data_;
  std::unique_ptr<Communicator> comm_;
  const GradSyncOptions grad_sync_options_;
  std::optional<core::Plan> switched_plan_;    // the running re-plan, if any
  std::unique_ptr<GradSyncDriver> grad_sync_;  // null without data parallelism
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<KeyValueStore> plan_store_;
  std::unique_ptr<PlanSwitcher> switcher_;
};

absl::Status RankRun::Prepare() {
  auto stages = MakeStages(job_, device_, &running_iteration_);
  if (!stages.ok()) return stages.status();
  auto checkpoint = JobCheckpointer::Make(job_);
  if (!checkpoint.ok()) return checkpoint.status();
  checkpoint_ = *std::move(checkpoint);
  if (absl::Status st = OpenData(job_, *stages, data_); !st.ok()) return st;
  if (absl::Status st = Connect(); !st.ok()) return st;
  return MakeExecutor(*std::move(stages));
}

absl::Status RankRun::Connect() {
  const RankPosition& rank = job_.rank;
  CommunicatorOptions co;
  co.pipeline_rank = rank.pipeline_rank;
  co.pipeline_size = rank.pipeline_size;
  co.data_rank = rank.data_rank;
  co.data_size = rank.data_size;
  co.key_prefix = job_.rendezvous_prefix;
  co.timeout = options_.comm_timeout;
  co.hostname = options_.hostname;
  co.device_index = options_.device_index;
  auto comm = NewCommunicator(device_, co, rendezvous_);
  if (!comm.ok()) return comm.status();
  comm_ = *std::move(comm);
  Log(absl::StrFormat("job %s rank %d.%d: stages on %s, %s data path", job_.job_id,
                      rank.pipeline_rank, rank.data_rank, device_.str(),
                      comm_->device().is_cuda() ? "NCCL" : "TCP streams"));
  return absl::OkStatus();
}

absl::Status RankRun::MakeExecutor(Stages stages) {
  // Gradient sync across the DP group: each bucket's all-reduce fires once, right after its
  // last contribution (or, with overlap off, after the last action).
  if (job_.rank.data_size > 1) {
    auto driver =
        NewGradSyncDriver(job_.plan, job_.rank.pipeline_rank, stages, grad_sync_options_, *comm_);
    if (!driver.ok()) return driver.status();
    grad_sync_ = *std::move(driver);
  }
  auto exec =
      Executor::Make(job_.plan, job_.rank.pipeline_rank, job_.rank.data_rank,
                     ExecutorConfigFor(job_, device_, options_, cancelled_), std::move(stages),
                     *comm_, data_.tokens(), grad_sync_.get(), &reports_);
  if (!exec.ok()) return exec.status();
  exec_ = *std::move(exec);
  return absl::OkStatus();
}

absl::StatusOr<int> RankRun::Resume() {
  int start = job_.start_iteration;
  if (checkpoint_ != nullptr) {
    auto resumed = checkpoint_->Resume(*exec_, rendezvous_, options_.comm_timeout);
    if (!resumed.ok()) return resumed.status();
    start = std::max(start, *resumed);
  }
  return start;
}

absl::Status RankRun::Train(int start) {
  // Re-plans (plan_switch.h): answered as they arrive, applied at their iteration on every rank.
  plan_store_ = NewPrefixStore(rendezvous_, job_.rendezvous_prefix);
  switcher_ = std::make_unique<PlanSwitcher>(
      *plan_store_, job_.plan, job_.plan_version, job_.attempt, job_.rank.global_rank,
      job_.rank.pipeline_size * job_.rank.data_size, options_.comm_timeout);
  PlanUpdateChannel* channel = options_.plan_updates;
  struct Detach {
    PlanUpdateChannel* channel;
    ~Detach() {
      if (channel != nullptr) channel->Attach(nullptr);
    }
  } detach{channel};
  if (channel != nullptr) {
    channel->Attach([switcher = switcher_.get()](const PlanUpdate& u) { switcher->Offer(u); });
  }
  for (int it = start; it < job_.settings.train.iterations; ++it) {
    if (cancelled_.load()) return absl::CancelledError("job cancelled");
    running_iteration_.store(it, std::memory_order_relaxed);
    if (absl::Status st = SwitchPlanIfDue(it); !st.ok()) return st;
    if (absl::Status st = RunIteration(it); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status RankRun::SwitchPlanIfDue(int it) {
  absl::StatusOr<std::optional<PlanSwitch>> next = switcher_->BeforeIteration(it);
  if (!next.ok()) return next.status();
  if (!next->has_value()) return absl::OkStatus();
  switched_plan_ = std::move((*next)->plan);
  std::unique_ptr<GradSyncDriver> driver;
  if (grad_sync_ != nullptr) {
    // The launch order comes from the plan: every replica rebuilds it at the same iteration.
    auto d = NewGradSyncDriver(*switched_plan_, job_.rank.pipeline_rank, exec_->stages(),
                               grad_sync_options_, *comm_);
    if (!d.ok()) return d.status();
    driver = *std::move(d);
  }
  if (absl::Status st = exec_->SetPlan(*switched_plan_, driver.get()); !st.ok()) return st;
  if (driver != nullptr) grad_sync_ = std::move(driver);
  LogInfo("job ", job_.job_id, " rank ", job_.rank.pipeline_rank, ".", job_.rank.data_rank,
          ": plan v", (*next)->version, " from iteration ", it);
  return absl::OkStatus();
}

absl::Status RankRun::RunIteration(int it) {
  auto summary = exec_->RunIteration(it);
  if (!summary.ok()) return summary.status();
  IterationReport report;
  report.iteration = it;
  report.summary = *std::move(summary);
  // A synthetic model's last stage returns a made-up falling scalar only to close the forward;
  // it is no loss, so none is reported (no zpipe_loss, no loss in status or watch).
  if (std::holds_alternative<SyntheticSource>(job_.settings.model)) report.summary.loss.reset();
  if (absl::Status st = CheckpointAfter(it, report); !st.ok()) return st;
  if (options_.metrics != nullptr) {
    options_.metrics->OnIteration(job_.job_id, job_.rank.pipeline_rank, job_.rank.data_rank,
                                  report.summary);
  }
  reports_.Flush();  // this iteration's actions reach the coordinator before its report
  report.plan_version = switcher_->version();
  if (absl::Status st = EvaluateAfter(it, report); !st.ok()) return st;
  if (!reports_.ReportIteration(report)) {
    return absl::UnavailableError("coordinator stream closed");
  }
  return absl::OkStatus();
}

absl::Status RankRun::CheckpointAfter(int it, IterationReport& report) {
  if (checkpoint_ == nullptr) return absl::OkStatus();
  auto step = checkpoint_->AfterIteration(*exec_, it + 1, report.summary.loss);
  if (!step.ok()) return step.status();
  report.checkpoint_stall = step->stall;
  report.checkpoint_error = step->skipped;
  if (it + 1 == job_.settings.train.iterations) {
    // The job's last checkpoint: its result goes with the last iteration's report.
    auto end = checkpoint_->Finish();
    if (!end.ok()) return end.status();
    if (!end->skipped.empty()) {
      absl::StrAppend(&report.checkpoint_error, report.checkpoint_error.empty() ? "" : "; ",
                      end->skipped);
    }
  }
  return absl::OkStatus();
}

absl::Status RankRun::EvaluateAfter(int it, IterationReport& report) {
  const std::optional<EvalConfig>& eval = job_.settings.eval;
  if (!eval || ((it + 1) % eval->every != 0 && it + 1 != job_.settings.train.iterations)) {
    return absl::OkStatus();
  }
  auto loss = exec_->Evaluate(eval->batches, [this](int k) { return data_.eval->Batch(k); });
  if (!loss.ok()) return loss.status();
  report.eval_loss = *loss;
  return absl::OkStatus();
}

absl::Status RankRun::Finish() {
  if (checkpoint_ != nullptr) {
    // Nothing in flight here unless the loop ran no iteration; still, never leave a write behind.
    if (auto end = checkpoint_->Finish(); !end.ok()) return end.status();
  }
  reports_.Flush();
  if (!reports_.ReportFinished()) return absl::UnavailableError("coordinator stream closed");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------- profiling

// The cuts of the checkpoint a job would resume from; empty when none.
std::vector<int> CheckpointCuts(const JobSettings& job) {
  if (!job.checkpoint || job.checkpoint->dir.empty()) return {};
  auto root = CheckpointRoot(job.checkpoint->dir, job.name);
  if (!root.ok()) return {};
  auto point = LatestCompleteCheckpoint(*root);
  if (!point.ok() || !point->has_value() || (*point)->manifest.iteration > job.train.iterations) {
    return {};
  }
  const nlohmann::json model = nlohmann::json::parse((*point)->manifest.model_json, nullptr, false);
  std::vector<int> cuts;
  for (const char* kind : {"torchscript", "python"}) {
    if (model.is_object() && model.contains(kind) && model[kind].contains("cuts")) {
      for (const auto& c : model[kind]["cuts"]) {
        if (c.is_number_integer()) cuts.push_back(c.get<int>());
      }
    }
  }
  return cuts;
}

// OK when the token file at `path` fits a model of `vocab` and holds a window of seq_len + 1.
absl::Status CheckTokenFile(const std::string& path, const std::string& dtype, int seq_len,
                            int64_t vocab) {
  auto file = model::TokenFile::Open(path, dtype);
  if (!file.ok()) return file.status();
  if (absl::Status st = file->ValidateVocab(vocab); !st.ok()) return st;
  if (file->Windows(seq_len) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' holds ", file->size(),
                                                   " tokens, not one window of "
                                                   "seq_len ",
                                                   seq_len, " + 1"));
  }
  return absl::OkStatus();
}

// The problem with a TorchScript or Python job's model and data files, or empty when there is
// none; `blocks` gets the timed blocks.
std::string ProfileBlockModel(const JobSettings& job, std::vector<core::BlockCost>& blocks) {
  auto model = LoadBlockModel(job.model, job.train.seed, job.seq_len, job.microbatch_size);
  if (!model.ok()) return std::string(model.status().message());
  // The data must fit the model: the same checks a rank makes when it starts.
  for (const auto& [what, path] :
       {std::pair<std::string, std::string>{"data", job.data ? job.data->path : ""},
        {"eval", job.eval ? job.eval->path : ""}}) {
    if (path.empty()) continue;
    absl::Status st = CheckTokenFile(path, job.data->dtype, job.seq_len, (*model)->vocab());
    if (!st.ok()) return absl::StrCat(what, ": ", st.message());
  }
  auto timed = model::ProfileBlocks(**model, job.microbatch_size, job.seq_len);
  if (!timed.ok()) {
    return absl::StrCat("model ", (*model)->path(), ": profiling: ", timed.status().message());
  }
  blocks = *std::move(timed);
  return "";
}

}  // namespace

absl::Status CanRunCudaJobs(const JobRunnerOptions& options) {
  if (options.device_kind != DeviceKind::kCuda) {
    return absl::FailedPreconditionError(
        "device: cuda: this worker was started for the CPU (--device cpu); start it with "
        "--device cuda:N");
  }
  if (!TorchHasCuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device: cuda: this worker's LibTorch ", model::TorchVersion(),
        " was built without CUDA (a CPU-only build); build the worker against a CUDA LibTorch"));
  }
  if (!torch::cuda::is_available() || static_cast<int64_t>(options.device_index) >=
                                          static_cast<int64_t>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(
        absl::StrCat("device: cuda: LibTorch sees ", torch::cuda::device_count(),
                     " CUDA device(s); this worker was started for cuda:", options.device_index));
  }
  if (!NcclAvailable()) {
    return absl::FailedPreconditionError(
        "device: cuda: this worker was built without the NCCL communicator (no CUDA toolkit or "
        "NCCL found at build time), so it has no GPU data path");
  }
  return absl::OkStatus();
}

JobProfile ProfileJob(const JobSettings& job, const DataRoots& data_roots) {
  JobProfile out;
  if (absl::Status st = data_roots.CheckJob(job); !st.ok()) {
    out.error = std::string(st.message());
    return out;
  }
  if (BlockModelCuts(job.model) == nullptr) {
    out.error = "only torchscript and python models are profiled";
    return out;
  }
  out.error = ProfileBlockModel(job, out.blocks);
  if (out.error.empty()) out.checkpoint_cuts = CheckpointCuts(job);
  return out;
}

absl::Status RunJob(const JobConfig& job, KeyValueStore& rendezvous, JobReporter& reports,
                    const JobRunnerOptions& options, const std::atomic<bool>& cancelled) {
  if (absl::Status st = CheckJobCanRun(job, options); !st.ok()) return st;
  RankRun run(job, rendezvous, reports, options, cancelled);
  if (absl::Status st = run.Prepare(); !st.ok()) return st;
  absl::StatusOr<int> start = run.Resume();
  if (!start.ok()) return start.status();
  if (absl::Status st = run.Train(*start); !st.ok()) return st;
  return run.Finish();
}

}  // namespace zpipe::worker
