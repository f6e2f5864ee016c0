#include "worker/daemon/job_runner.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/plan.h"
#include "util/log.h"
#include "worker/comm/factory/communicator_factory.h"
#include "worker/daemon/grpc_store.h"
#include "worker/daemon/job_checkpoint.h"
#include "worker/daemon/plan_switch.h"
#include "worker/daemon/progress_reporter.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/executor/executor.h"
#include "worker/executor/grad_sync_driver.h"
#include "worker/model/block_profile.h"
#include "worker/model/gpt.h"
#include "worker/model/synthetic.h"
#include "worker/model/token_file.h"
#include "worker/model/torch_compat.h"
#include "worker/model/torchscript.h"

namespace zpipe::worker {
namespace {

// L: data.seq_len, or the GPT model's.
int SeqLen(const zpipe::v1::JobSpec& spec) {
  if (spec.data().seq_len() > 0) return spec.data().seq_len();
  return spec.model().has_gpt() ? spec.model().gpt().seq_len() : 0;
}

std::string DataDtype(const zpipe::v1::JobSpec& spec) {
  return spec.data().dtype().empty() ? "uint16" : spec.data().dtype();
}

// Options of the stage this rank runs as local chunk `chunk` on `device`.
model::StageOptions StageOptionsFor(const zpipe::v1::Assignment& a, const core::Plan& plan,
                                    int chunk, torch::Device device) {
  model::StageOptions so;
  so.device = device;
  so.stage = plan.placement.StageOf(a.pipeline_rank(), chunk);
  so.num_stages = plan.num_stages();
  so.num_microbatches = plan.num_microbatches;
  so.seed = a.spec().train().seed();
  return so;
}

absl::StatusOr<std::vector<std::unique_ptr<model::Stage>>> MakeTorchScriptStages(
    const zpipe::v1::Assignment& a, const core::Plan& plan, torch::Device device) {
  const zpipe::v1::JobSpec& spec = a.spec();
  const auto& ts = spec.model().torchscript();
  auto loaded = model::TorchScriptModel::Load(ts.path(), SeqLen(spec),
                                              std::max(1, spec.batch().microbatch_size()));
  if (!loaded.ok()) return loaded.status();
  std::vector<int> cuts(ts.cuts().begin(), ts.cuts().end());
  auto bounds = model::StageBoundaries(cuts, (*loaded)->num_blocks(), plan.num_stages());
  if (!bounds.ok()) return bounds.status();
  std::vector<std::unique_ptr<model::Stage>> stages;
  for (int c = 0; c < plan.placement.chunks_per_rank(); ++c) {
    const model::StageOptions so = StageOptionsFor(a, plan, c, device);
    auto stage =
        model::MakeTorchScriptStage(*loaded, (*bounds)[so.stage], (*bounds)[so.stage + 1], so);
    if (!stage.ok()) return stage.status();
    if (model::FusedBackward(**stage)) {
      Log(
          absl::StrFormat("job %s stage %d (blocks %d..%d): no B/W split found in its autograd "
                          "graph; its backward runs whole in B",
                          a.job_id(), so.stage, (*bounds)[so.stage], (*bounds)[so.stage + 1] - 1));
    }
    stages.push_back(*std::move(stage));
  }
  return stages;
}

// The vocabulary token ids must stay below: the GPT model's, or the TorchScript model's logits.
int64_t Vocab(const zpipe::v1::JobSpec& spec) {
  if (spec.model().has_gpt()) return spec.model().gpt().vocab();
  return 0;
}

// `iteration`: the iteration running, for synthetic cost drift (model.synthetic.w_slowdown).
absl::StatusOr<std::vector<std::unique_ptr<model::Stage>>> MakeStages(
    const zpipe::v1::Assignment& a, const core::Plan& plan, torch::Device device,
    const std::atomic<int>* iteration) {
  if (a.spec().model().has_torchscript()) return MakeTorchScriptStages(a, plan, device);
  const zpipe::v1::JobSpec& spec = a.spec();
  std::vector<std::unique_ptr<model::Stage>> stages;
  for (int c = 0; c < plan.placement.chunks_per_rank(); ++c) {
    const model::StageOptions so = StageOptionsFor(a, plan, c, device);
    absl::StatusOr<std::unique_ptr<model::Stage>> stage;
    if (spec.model().has_gpt()) {
      const auto& g = spec.model().gpt();
      stage = model::MakeGptStage(model::GptConfig{.layers = g.layers(),
                                                   .hidden = g.hidden(),
                                                   .heads = g.heads(),
                                                   .seq_len = g.seq_len(),
                                                   .vocab = g.vocab()},
                                  so);
    } else if (spec.model().has_synthetic()) {
      if (so.stage >= a.stage_costs_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("assignment has no stage_costs entry for stage ", so.stage));
      }
      const auto& cost = a.stage_costs(so.stage);
      model::SyntheticStageConfig sc;
      sc.forward_ms = cost.forward_ms();
      sc.backward_ms = cost.backward_ms();
      sc.weight_ms = cost.weight_ms();
      sc.activation_kb = cost.activation_kb();
      sc.params_mb = cost.params_mb();
      sc.param_tensors = spec.model().synthetic().param_tensors();
      if (spec.model().synthetic().has_w_slowdown()) {
        sc.iteration = iteration;
        sc.w_slowdown_after = spec.model().synthetic().w_slowdown().after_iteration();
        sc.w_slowdown_factor = spec.model().synthetic().w_slowdown().factor();
      }
      stage = model::MakeSyntheticStage(sc, so);
    } else {
      return absl::InvalidArgumentError("assignment spec has no model");
    }
    if (!stage.ok()) return stage.status();
    stages.push_back(*std::move(stage));
  }
  return stages;
}

void FillStats(const IterationSummary& s, int pipeline_rank, int data_rank,
               zpipe::v1::RankIterationStats* out) {
  out->set_pipeline_rank(pipeline_rank);
  out->set_data_rank(data_rank);
  out->set_duration_s(s.duration_s);
  out->set_busy_s(s.busy_s);
  out->set_idle_s(s.idle_s);
  out->set_forward_s(s.forward_s);
  out->set_backward_s(s.backward_s);
  out->set_weight_s(s.weight_s);
  out->set_bubble_ratio(s.bubble_ratio);
  out->set_reduce_s(s.reduce_s);
  out->set_exposed_reduce_s(s.exposed_reduce_s);
  out->set_p2p_wait_s(s.p2p_wait_s);
  out->set_tokens(s.tokens);
  out->set_step_s(s.step_s);
  out->set_overlapped_step_s(s.overlapped_step_s);
}

// The cuts of the checkpoint a job with `spec` would resume from; empty when none.
std::vector<int> CheckpointCuts(const zpipe::v1::JobSpec& spec) {
  if (spec.checkpoint().every() <= 0 || spec.checkpoint().dir().empty()) return {};
  auto root = CheckpointRoot(spec);
  if (!root.ok()) return {};
  auto point = LatestCompleteCheckpoint(*root);
  if (!point.ok() || !point->has_value() ||
      (*point)->manifest.iteration > spec.train().iterations()) {
    return {};
  }
  const nlohmann::json model = nlohmann::json::parse((*point)->manifest.model_json, nullptr, false);
  std::vector<int> cuts;
  if (model.is_object() && model.contains("torchscript") && model["torchscript"].contains("cuts")) {
    for (const auto& c : model["torchscript"]["cuts"]) {
      if (c.is_number_integer()) cuts.push_back(c.get<int>());
    }
  }
  return cuts;
}

}  // namespace

absl::Status CanRunCudaJobs(const JobRunnerOptions& options) {
  if (options.device_kind != zpipe::v1::DEVICE_KIND_CUDA) {
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

zpipe::v1::ProfileResult ProfileJob(const zpipe::v1::ProfileRequest& request,
                                    const DataRoots& data_roots) {
  const zpipe::v1::JobSpec& spec = request.spec();
  zpipe::v1::ProfileResult out;
  out.set_job_id(request.job_id());
  out.set_attempt(request.attempt());
  if (absl::Status st = data_roots.CheckJob(spec); !st.ok()) {
    out.set_error(std::string(st.message()));
    return out;
  }
  if (!spec.model().has_torchscript()) {
    out.set_error("only torchscript models are profiled");
    return out;
  }
  const int microbatch_size = std::max(1, spec.batch().microbatch_size());
  auto model = model::TorchScriptModel::Load(spec.model().torchscript().path(), SeqLen(spec),
                                             microbatch_size);
  if (!model.ok()) {
    out.set_error(std::string(model.status().message()));
    return out;
  }
  // The data must fit the model: the same checks a rank makes when it starts.
  for (const auto& [what, path] : {std::pair<std::string, std::string>{"data", spec.data().path()},
                                   {"eval", spec.eval().path()}}) {
    if (path.empty()) continue;
    auto file = model::TokenFile::Open(path, DataDtype(spec));
    absl::Status st = file.ok() ? file->ValidateVocab((*model)->vocab()) : file.status();
    if (st.ok() && file->Windows(SeqLen(spec)) < 1) {
      st = absl::InvalidArgumentError(absl::StrCat("token file '", path, "' holds ", file->size(),
                                                   " tokens, not one window of seq_len ",
                                                   SeqLen(spec), " + 1"));
    }
    if (!st.ok()) {
      out.set_error(absl::StrCat(what, ": ", st.message()));
      return out;
    }
  }
  auto blocks = model::ProfileBlocks(**model, microbatch_size, SeqLen(spec));
  if (!blocks.ok()) {
    out.set_error(absl::StrCat("model ", spec.model().torchscript().path(),
                               ": profiling: ", blocks.status().message()));
    return out;
  }
  for (const core::BlockCost& b : *blocks) {
    zpipe::v1::BlockProfile* p = out.add_blocks();
    p->set_forward_ms(b.f_ms);
    p->set_backward_ms(b.b_ms);
    p->set_weight_ms(b.w_ms);
    p->set_activation_bytes(b.activation_bytes);
    p->set_param_bytes(b.param_bytes);
  }
  for (int c : CheckpointCuts(spec)) out.add_checkpoint_cuts(c);
  return out;
}

absl::Status RunAssignment(const zpipe::v1::Assignment& a,
                           zpipe::v1::WorkerService::StubInterface& stub,
                           const SendToCoordinator& send, const JobRunnerOptions& options,
                           const std::atomic<bool>& cancelled) {
  const zpipe::v1::JobSpec& spec = a.spec();
  if (options.data_roots == nullptr) return absl::InternalError("RunAssignment: no data roots");
  if (absl::Status st = options.data_roots->CheckJob(spec); !st.ok()) return st;
  auto plan = core::ParsePlanText(a.plan_text());
  if (!plan.ok())
    return absl::InvalidArgumentError(absl::StrCat("plan: ", plan.status().message()));
  if (a.pipeline_rank() < 0 || a.pipeline_rank() >= plan->num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline rank ", a.pipeline_rank(), " is not in the plan"));
  }
  // Never silently on the CPU: a CUDA job runs on this worker's GPU or fails saying why.
  const bool cuda = spec.device() == zpipe::v1::DEVICE_KIND_CUDA;
  if (cuda) {
    if (absl::Status st = CanRunCudaJobs(options); !st.ok()) return st;
  }
  const torch::Device device =
      cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.device_index))
           : torch::Device(torch::kCPU);
  std::atomic<int> running_iteration{a.start_iteration()};
  auto stages = MakeStages(a, *plan, device, &running_iteration);
  if (!stages.ok()) return stages.status();
  auto checkpoint = JobCheckpointer::Make(a, *plan);  // null when checkpoint.every is 0
  if (!checkpoint.ok()) return checkpoint.status();

  // Data: a token file when the spec has one (read by the ranks holding stage 0 or the last
  // stage), else GPT's synthetic tokens.
  const core::Placement& placement = plan->placement;
  const bool reads_data = placement.RankOf(0) == a.pipeline_rank() ||
                          placement.RankOf(plan->num_stages() - 1) == a.pipeline_rank();
  const int microbatch_size = std::max(1, spec.batch().microbatch_size());
  int64_t vocab = Vocab(spec);
  std::unique_ptr<model::TokenFileData> file_data;
  std::optional<model::TokenFileEval> eval_data;
  if (spec.has_data() && reads_data) {
    model::TokenFileData::Options o;
    o.path = spec.data().path();
    o.dtype = DataDtype(spec);
    o.seq_len = SeqLen(spec);
    o.data_size = std::max(1, a.data_size());
    o.microbatches = plan->num_microbatches;
    o.microbatch_size = microbatch_size;
    if (spec.data().has_shuffle_seed()) o.shuffle_seed = spec.data().shuffle_seed();
    auto d = model::TokenFileData::Make(o);
    if (!d.ok())
      return absl::Status(d.status().code(), absl::StrCat("data: ", d.status().message()));
    if (vocab == 0) vocab = model::TorchScriptVocab(*stages);
    if (vocab > 0) {
      if (absl::Status st = (*d)->file().ValidateVocab(vocab); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("data: ", st.message()));
      }
    }
    file_data = *std::move(d);
    if (!spec.eval().path().empty()) {
      const int batches = spec.eval().batches() > 0 ? spec.eval().batches() : 4;
      auto e = model::TokenFileEval::Make(spec.eval().path(), DataDtype(spec), SeqLen(spec),
                                          microbatch_size, batches);
      if (!e.ok())
        return absl::Status(e.status().code(), absl::StrCat("eval: ", e.status().message()));
      if (vocab > 0) {
        if (absl::Status st = e->file().ValidateVocab(vocab); !st.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("eval: ", st.message()));
        }
      }
      eval_data.emplace(*std::move(e));
    }
  }
  std::optional<model::SyntheticTokenData> data;
  if (spec.model().has_gpt() && !spec.has_data()) {
    auto d = model::SyntheticTokenData::Make(spec.train().seed(), spec.model().gpt().vocab(),
                                             spec.model().gpt().seq_len(),
                                             std::max(1, spec.batch().microbatch_size()));
    if (!d.ok()) return d.status();
    data.emplace(*std::move(d));
  }

  auto store = NewGrpcRendezvousStore(stub, a.job_id(), {options.instance_id, options.token});
  CommunicatorOptions co;
  co.pipeline_rank = a.pipeline_rank();
  co.pipeline_size = a.pipeline_size();
  co.data_rank = a.data_rank();
  co.data_size = std::max(1, a.data_size());
  co.key_prefix = a.rendezvous_prefix();
  co.timeout = options.comm_timeout;
  co.hostname = options.hostname;
  co.device_index = options.device_index;
  auto comm = NewCommunicator(device, co, *store);
  if (!comm.ok()) return comm.status();
  Log(absl::StrFormat("job %s rank %d.%d: stages on %s, %s data path", a.job_id(),
                      a.pipeline_rank(), a.data_rank(), device.str(),
                      (*comm)->device().is_cuda() ? "NCCL" : "TCP streams"));
  // Gradient sync across the DP group: each bucket's all-reduce fires once, right after its
  // last contribution (or, with overlap off, after the last action).
  std::unique_ptr<GradSyncDriver> grad_sync;
  GradSyncOptions gso;
  const double bucket_mb = spec.grad_sync().bucket_mb() > 0 ? spec.grad_sync().bucket_mb() : 25;
  gso.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
  gso.overlap = !spec.grad_sync().has_overlap() || spec.grad_sync().overlap();
  gso.wait_timeout = options.comm_timeout;
  if (co.data_size > 1) {
    auto driver = NewGradSyncDriver(*plan, a.pipeline_rank(), *stages, gso, **comm);
    if (!driver.ok()) return driver.status();
    grad_sync = *std::move(driver);
  }

  ExecutorConfig config;
  config.microbatch_size = std::max(1, spec.batch().microbatch_size());
  config.timeout = options.comm_timeout;
  const zpipe::v1::TrainSpec& train = spec.train();
  config.optimizer = train.optimizer().empty() ? "adamw" : train.optimizer();
  config.lr = train.lr() > 0 ? train.lr() : 3e-4;
  if (train.has_lr_schedule()) {
    auto schedule =
        LrSchedule::Make(config.lr, train.lr_schedule().warmup(), train.lr_schedule().decay(),
                         train.lr_schedule().min_lr(), train.iterations());
    if (!schedule.ok()) return schedule.status();
    config.lr_schedule = *schedule;
  }
  if (train.has_weight_decay()) config.weight_decay = train.weight_decay();
  if (train.betas_size() == 2) {
    config.beta1 = train.betas(0);
    config.beta2 = train.betas(1);
  }
  if (train.has_eps()) config.eps = train.eps();
  if (train.has_clip_grad_norm()) config.max_grad_norm = train.clip_grad_norm();
  config.device = device;
  config.precision = train.precision().empty() ? "fp32" : train.precision();
  config.cancelled = &cancelled;
  ProgressReporter reporter(a.job_id(), a.pipeline_rank(), a.data_rank(), send);
  auto exec =
      Executor::Make(*plan, a.pipeline_rank(), a.data_rank(), config, *std::move(stages), **comm,
                     file_data ? static_cast<const model::TokenData*>(file_data.get())
                     : data    ? static_cast<const model::TokenData*>(&*data)
                               : nullptr,
                     grad_sync.get(), &reporter);
  if (!exec.ok()) return exec.status();

  int start = a.start_iteration();
  if (*checkpoint != nullptr) {
    auto resumed = (*checkpoint)->Resume(**exec, *store, options.comm_timeout);
    if (!resumed.ok()) return resumed.status();
    start = std::max(start, *resumed);
  }
  // Re-plans (plan_switch.h): answered as they arrive, applied at their iteration on every rank.
  auto plan_store = NewPrefixStore(*store, a.rendezvous_prefix());
  PlanSwitcher switcher(*plan_store, *plan, a.plan_version(), a.attempt(), a.global_rank(),
                        a.pipeline_size() * co.data_size, options.comm_timeout);
  struct Detach {
    PlanUpdateChannel* channel;
    ~Detach() {
      if (channel != nullptr) channel->Attach(nullptr);
    }
  } detach{options.plan_updates};
  if (options.plan_updates != nullptr) {
    options.plan_updates->Attach(
        [&switcher](const zpipe::v1::PlanUpdate& u) { switcher.Offer(u); });
  }
  std::optional<core::Plan> switched_plan;  // outlives the executor's and grad sync's use of it
  const int iterations = spec.train().iterations();
  for (int it = start; it < iterations; ++it) {
    if (cancelled.load()) return absl::CancelledError("job cancelled");
    running_iteration.store(it, std::memory_order_relaxed);
    absl::StatusOr<std::optional<PlanSwitch>> next = switcher.BeforeIteration(it);
    if (!next.ok()) return next.status();
    if (next->has_value()) {
      switched_plan = std::move((*next)->plan);
      std::unique_ptr<GradSyncDriver> driver;
      if (grad_sync != nullptr) {
        // The launch order comes from the plan: every replica rebuilds it at the same iteration.
        auto d =
            NewGradSyncDriver(*switched_plan, a.pipeline_rank(), (*exec)->stages(), gso, **comm);
        if (!d.ok()) return d.status();
        driver = *std::move(d);
      }
      if (absl::Status st = (*exec)->SetPlan(*switched_plan, driver.get()); !st.ok()) return st;
      if (driver != nullptr) grad_sync = std::move(driver);
      std::fprintf(stderr, "zpipe-worker: job %s rank %d.%d: plan v%d from iteration %d\n",
                   a.job_id().c_str(), a.pipeline_rank(), a.data_rank(), (*next)->version, it);
    }
    auto summary = (*exec)->RunIteration(it);
    if (!summary.ok()) return summary.status();
    // A synthetic model's last stage returns a made-up falling scalar only to close the forward;
    // it is no loss, so none is reported (no zpipe_loss, no loss in status or watch).
    if (spec.model().has_synthetic()) summary->loss.reset();
    JobCheckpointer::Step saved;
    if (*checkpoint != nullptr) {
      auto step = (*checkpoint)->AfterIteration(**exec, it + 1, summary->loss);
      if (!step.ok()) return step.status();
      saved = *std::move(step);
      if (it + 1 == iterations) {
        // The job's last checkpoint: its result goes with the last iteration's report.
        auto end = (*checkpoint)->Finish();
        if (!end.ok()) return end.status();
        if (!end->skipped.empty()) {
          absl::StrAppend(&saved.skipped, saved.skipped.empty() ? "" : "; ", end->skipped);
        }
      }
    }
    if (options.metrics != nullptr) {
      options.metrics->OnIteration(a.job_id(), a.pipeline_rank(), a.data_rank(), *summary);
    }
    reporter.Flush();  // this iteration's actions reach the coordinator before its report
    zpipe::v1::WorkerMessage msg;
    auto* report = msg.mutable_iteration();
    report->set_job_id(a.job_id());
    report->set_iteration(it);
    FillStats(*summary, a.pipeline_rank(), a.data_rank(), report->mutable_stats());
    report->mutable_stats()->set_checkpoint_stall_s(absl::ToDoubleSeconds(saved.stall));
    report->mutable_stats()->set_checkpoint_error(saved.skipped);
    report->mutable_stats()->set_plan_version(switcher.version());
    if (summary->loss) report->set_loss(*summary->loss);
    const int eval_every = spec.eval().every();
    if (!spec.eval().path().empty() && eval_every > 0 &&
        ((it + 1) % eval_every == 0 || it + 1 == iterations)) {
      const int batches = spec.eval().batches() > 0 ? spec.eval().batches() : 4;
      auto eval_loss = (*exec)->Evaluate(batches, [&](int k) { return eval_data->Batch(k); });
      if (!eval_loss.ok()) return eval_loss.status();
      if (eval_loss->has_value()) report->set_eval_loss(**eval_loss);
    }
    if (!send(msg)) return absl::UnavailableError("coordinator stream closed");
  }
  if (*checkpoint != nullptr) {
    // Nothing in flight here unless the loop ran no iteration; still, never leave a write behind.
    if (auto end = (*checkpoint)->Finish(); !end.ok()) return end.status();
  }
  reporter.Flush();
  zpipe::v1::WorkerMessage done;
  done.mutable_finished()->set_job_id(a.job_id());
  done.mutable_finished()->set_pipeline_rank(a.pipeline_rank());
  done.mutable_finished()->set_data_rank(a.data_rank());
  if (!send(done)) return absl::UnavailableError("coordinator stream closed");
  return absl::OkStatus();
}

}  // namespace zpipe::worker
