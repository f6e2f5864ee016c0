#include "worker/daemon/job_proto.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

// A field the coordinator fills in before a job reaches a worker (coordinator/spec_defaults.h).
absl::Status Unresolved(absl::string_view field) {
  return Bad(field,
             "is unset; the coordinator resolves it before it assigns a job (is the coordinator "
             "older than this worker?)");
}

// `status` with `prefix` before its message.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::StatusOr<ModelSource> ModelFromProto(const zpipe::v1::ModelSpec& m) {
  switch (m.kind_case()) {
    case zpipe::v1::ModelSpec::kGpt: {
      const zpipe::v1::GptModel& g = m.gpt();
      return GptSource{model::GptConfig{.layers = g.layers(),
                                        .hidden = g.hidden(),
                                        .heads = g.heads(),
                                        .seq_len = g.seq_len(),
                                        .vocab = g.vocab()}};
    }
    case zpipe::v1::ModelSpec::kSynthetic: {
      SyntheticSource s;  // stage costs come with the assignment (FromAssignment)
      s.param_tensors = m.synthetic().param_tensors();
      if (m.synthetic().has_w_slowdown()) {
        s.w_slowdown = SyntheticSource::Slowdown{m.synthetic().w_slowdown().after_iteration(),
                                                 m.synthetic().w_slowdown().factor()};
      }
      return s;
    }
    case zpipe::v1::ModelSpec::kTorchscript:
      return TorchScriptSource{m.torchscript().path(),
                               {m.torchscript().cuts().begin(), m.torchscript().cuts().end()}};
    case zpipe::v1::ModelSpec::kPython: {
      const zpipe::v1::PythonModel& p = m.python();
      if (p.factory().empty()) return Unresolved("spec.model.python.factory");
      if (p.compile().empty()) return Unresolved("spec.model.python.compile");
      absl::StatusOr<python::CompileMode> compile = python::ParseCompileMode(p.compile());
      if (!compile.ok()) return Prefixed("spec.model.python.compile: ", compile.status());
      return PythonSource{.file = p.file(),
                          .factory = p.factory(),
                          .args_json = p.args(),
                          .cuts = {p.cuts().begin(), p.cuts().end()},
                          .compile = *compile};
    }
    case zpipe::v1::ModelSpec::KIND_NOT_SET:
      break;
  }
  return Bad("spec.model", "names no model (gpt, synthetic, torchscript or python)");
}

// What checkpoint manifests record of the model (job_config.h JobSettings::model_json).
std::string ModelJson(const zpipe::v1::ModelSpec& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, options).ok()) return "{}";
  return out;
}

absl::StatusOr<DeviceKind> DeviceFromSpec(zpipe::v1::DeviceKind kind) {
  switch (kind) {
    case zpipe::v1::DEVICE_KIND_CPU:
      return DeviceKind::kCpu;
    case zpipe::v1::DEVICE_KIND_CUDA:
      return DeviceKind::kCuda;
    case zpipe::v1::DEVICE_KIND_UNSPECIFIED:
      return Unresolved("spec.device");
    default:
      return Bad("spec.device", absl::StrCat("is unknown (", static_cast<int>(kind), ")"));
  }
}

// data and eval; `seq_len` is the resolved L.
absl::Status TokenFilesFromProto(const zpipe::v1::JobSpec& spec, JobSettings& out) {
  if (spec.has_data()) {
    const zpipe::v1::DataSpec& d = spec.data();
    if (d.dtype().empty()) return Unresolved("spec.data.dtype");
    if (d.seq_len() < 1) return Unresolved("spec.data.seq_len");
    TokenDataConfig data{d.path(), d.dtype(), std::nullopt};
    if (d.has_shuffle_seed()) data.shuffle_seed = d.shuffle_seed();
    out.data = std::move(data);
  }
  if (!spec.eval().path().empty()) {
    const zpipe::v1::EvalSpec& e = spec.eval();
    if (!out.data) return Bad("spec.eval", "needs a data section (its dtype and seq_len)");
    if (e.batches() < 1) return Unresolved("spec.eval.batches");
    if (e.every() < 1) return Bad("spec.eval.every", absl::StrCat("must be >= 1, got ", e.every()));
    out.eval = EvalConfig{e.path(), e.every(), e.batches()};
  }
  return absl::OkStatus();
}

// The optimizer and its settings: weight decay for all, betas and eps for adam and adamw.
absl::Status OptimizerFromProto(const zpipe::v1::TrainSpec& t, TrainConfig& out) {
  if (t.optimizer().empty()) return Unresolved("spec.train.optimizer");
  absl::StatusOr<Optimizer> optimizer = ParseOptimizer(t.optimizer());
  if (!optimizer.ok()) return Prefixed("spec.train.optimizer: ", optimizer.status());
  out.optimizer = *optimizer;
  if (!t.has_weight_decay()) return Unresolved("spec.train.weight_decay");
  out.weight_decay = t.weight_decay();
  const bool adam = out.optimizer == Optimizer::kAdam || out.optimizer == Optimizer::kAdamW;
  if (t.betas_size() == 2) {
    out.beta1 = t.betas(0);
    out.beta2 = t.betas(1);
  } else if (t.betas_size() != 0) {
    return Bad("spec.train.betas", absl::StrCat("needs two values, got ", t.betas_size()));
  } else if (adam) {
    return Unresolved("spec.train.betas");
  }
  if (t.has_eps()) {
    out.eps = t.eps();
  } else if (adam) {
    return Unresolved("spec.train.eps");
  }
  return absl::OkStatus();
}

// lr and, when the spec has one, its schedule over the iterations.
absl::Status LearningRateFromProto(const zpipe::v1::TrainSpec& t, TrainConfig& out) {
  if (!(t.lr() > 0)) return Bad("spec.train.lr", absl::StrCat("must be > 0, got ", t.lr()));
  out.lr = t.lr();
  if (!t.has_lr_schedule()) return absl::OkStatus();
  const zpipe::v1::LrSchedule& s = t.lr_schedule();
  if (s.decay().empty()) return Unresolved("spec.train.lr_schedule.decay");
  absl::StatusOr<LrSchedule> schedule =
      LrSchedule::Make(t.lr(), s.warmup(), s.decay(), s.min_lr(), t.iterations());
  if (!schedule.ok()) return Prefixed("spec.train.lr_schedule: ", schedule.status());
  out.lr_schedule = *schedule;
  return absl::OkStatus();
}

absl::StatusOr<TrainConfig> TrainFromProto(const zpipe::v1::TrainSpec& t) {
  TrainConfig out;
  out.iterations = t.iterations();
  out.seed = t.seed();
  if (absl::Status st = OptimizerFromProto(t, out); !st.ok()) return st;
  if (absl::Status st = LearningRateFromProto(t, out); !st.ok()) return st;
  if (!t.has_clip_grad_norm()) return Unresolved("spec.train.clip_grad_norm");
  out.clip_grad_norm = t.clip_grad_norm();
  if (t.precision().empty()) return Unresolved("spec.train.precision");
  absl::StatusOr<Precision> precision = ParsePrecision(t.precision());
  if (!precision.ok()) return Prefixed("spec.train.precision: ", precision.status());
  out.precision = *precision;
  return out;
}

absl::StatusOr<GradSyncConfig> GradSyncFromProto(const zpipe::v1::GradSyncSpec& g) {
  if (g.bucket_mb() == 0) return Unresolved("spec.grad_sync.bucket_mb");
  if (!(g.bucket_mb() > 0)) {
    return Bad("spec.grad_sync.bucket_mb", absl::StrCat("must be > 0, got ", g.bucket_mb()));
  }
  if (!g.has_overlap()) return Unresolved("spec.grad_sync.overlap");
  return GradSyncConfig{g.bucket_mb(), g.overlap()};
}

absl::StatusOr<std::optional<CheckpointConfig>> CheckpointFromProto(
    const zpipe::v1::CheckpointSpec& c) {
  if (c.every() <= 0) return std::optional<CheckpointConfig>();
  CheckpointConfig out{c.dir(), c.every(), std::max(0, c.keep()), false};
  switch (c.on_error()) {
    case zpipe::v1::CHECKPOINT_ON_ERROR_FAIL:
      break;
    case zpipe::v1::CHECKPOINT_ON_ERROR_SKIP:
      out.skip_errors = true;
      break;
    case zpipe::v1::CHECKPOINT_ON_ERROR_UNSPECIFIED:
      return Unresolved("spec.checkpoint.on_error");
    default:
      return Bad("spec.checkpoint.on_error",
                 absl::StrCat("is unknown (", static_cast<int>(c.on_error()), ")"));
  }
  return std::optional<CheckpointConfig>(std::move(out));
}

// For a synthetic model: every stage's costs, from the assignment.
absl::Status StageCostsFromProto(const zpipe::v1::Assignment& a, int num_stages,
                                 SyntheticSource& out) {
  if (a.stage_costs_size() < num_stages) {
    return Bad("stage_costs", absl::StrCat("has ", a.stage_costs_size(),
                                           " entries; a synthetic model needs one for each of the "
                                           "plan's ",
                                           num_stages, " stages"));
  }
  for (const zpipe::v1::StageCostInfo& c : a.stage_costs()) {
    out.stage_costs.push_back(
        {c.forward_ms(), c.backward_ms(), c.weight_ms(), c.activation_kb(), c.params_mb()});
  }
  return absl::OkStatus();
}

absl::Status RankFromProto(const zpipe::v1::Assignment& a, const core::Plan& plan,
                           RankPosition& out) {
  if (a.pipeline_rank() < 0 || a.pipeline_rank() >= plan.num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline rank ", a.pipeline_rank(), " is not in the plan"));
  }
  if (a.pipeline_size() < 1) return Bad("pipeline_size", "must be >= 1");
  if (a.data_size() < 1) return Bad("data_size", "must be >= 1");
  if (a.data_rank() < 0 || a.data_rank() >= a.data_size()) {
    return Bad("data_rank",
               absl::StrCat("is ", a.data_rank(), ", not in [0, data_size = ", a.data_size(), ")"));
  }
  out = RankPosition{a.pipeline_rank(), a.pipeline_size(), a.data_rank(), a.data_size(),
                     a.global_rank()};
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> JobConfigFromProto(const zpipe::v1::Assignment& a) {
  JobConfig job;
  job.job_id = a.job_id();
  job.attempt = a.attempt();
  job.rendezvous_prefix = a.rendezvous_prefix();
  job.plan_version = a.plan_version();
  job.start_iteration = a.start_iteration();
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(a.plan_text());
  if (!plan.ok()) return Prefixed("plan: ", plan.status());
  job.plan = *std::move(plan);
  if (absl::Status st = RankFromProto(a, job.plan, job.rank); !st.ok()) return st;
  absl::StatusOr<JobSettings> settings = JobSettingsFromProto(a.spec());
  if (!settings.ok()) return settings.status();
  job.settings = *std::move(settings);
  if (auto* synthetic = std::get_if<SyntheticSource>(&job.settings.model)) {
    if (absl::Status st = StageCostsFromProto(a, job.plan.num_stages(), *synthetic); !st.ok()) {
      return st;
    }
  }
  return job;
}

}  // namespace

absl::StatusOr<JobSettings> JobSettingsFromProto(const zpipe::v1::JobSpec& spec) {
  JobSettings out;
  out.name = spec.name();
  out.schedule = spec.schedule().kind();
  absl::StatusOr<ModelSource> model = ModelFromProto(spec.model());
  if (!model.ok()) return model.status();
  out.model = *std::move(model);
  out.model_json = ModelJson(spec.model());
  absl::StatusOr<DeviceKind> device = DeviceFromSpec(spec.device());
  if (!device.ok()) return device.status();
  out.device = *device;
  if (spec.batch().microbatch_size() < 1) {
    return Bad("spec.batch.microbatch_size",
               absl::StrCat("must be >= 1, got ", spec.batch().microbatch_size()));
  }
  out.microbatch_size = spec.batch().microbatch_size();
  if (absl::Status st = TokenFilesFromProto(spec, out); !st.ok()) return st;
  if (out.data) {
    out.seq_len = spec.data().seq_len();
  } else if (const auto* gpt = std::get_if<GptSource>(&out.model)) {
    out.seq_len = gpt->config.seq_len;
  } else if (std::holds_alternative<TorchScriptSource>(out.model)) {
    return Bad("spec.data", "is required for torchscript models (a token file: data.path)");
  } else if (std::holds_alternative<PythonSource>(out.model)) {
    return Bad("spec.data", "is required for python models (a token file: data.path)");
  }
  absl::StatusOr<TrainConfig> train = TrainFromProto(spec.train());
  if (!train.ok()) return train.status();
  out.train = *std::move(train);
  absl::StatusOr<GradSyncConfig> grad_sync = GradSyncFromProto(spec.grad_sync());
  if (!grad_sync.ok()) return grad_sync.status();
  out.grad_sync = *grad_sync;
  absl::StatusOr<std::optional<CheckpointConfig>> checkpoint =
      CheckpointFromProto(spec.checkpoint());
  if (!checkpoint.ok()) return checkpoint.status();
  out.checkpoint = *std::move(checkpoint);
  return out;
}

absl::StatusOr<JobConfig> FromAssignment(const zpipe::v1::Assignment& assignment) {
  absl::StatusOr<JobConfig> job = JobConfigFromProto(assignment);
  if (!job.ok()) return Prefixed("assignment: ", job.status());
  return job;
}

DeviceKind DeviceKindFromProto(zpipe::v1::DeviceKind kind) {
  return kind == zpipe::v1::DEVICE_KIND_CUDA ? DeviceKind::kCuda : DeviceKind::kCpu;
}

PlanUpdate PlanUpdateFromProto(const zpipe::v1::PlanUpdate& update) {
  return PlanUpdate{update.attempt(), update.plan_version(), update.switch_iteration(),
                    update.plan_text()};
}

zpipe::v1::ProfileResult ProfileResultToProto(const std::string& job_id, int attempt,
                                              const JobProfile& profile) {
  zpipe::v1::ProfileResult out;
  out.set_job_id(job_id);
  out.set_attempt(attempt);
  out.set_error(profile.error);
  for (const core::BlockCost& b : profile.blocks) {
    zpipe::v1::BlockProfile* p = out.add_blocks();
    p->set_forward_ms(b.f_ms);
    p->set_backward_ms(b.b_ms);
    p->set_weight_ms(b.w_ms);
    p->set_activation_bytes(b.activation_bytes);
    p->set_param_bytes(b.param_bytes);
  }
  for (int c : profile.checkpoint_cuts) out.add_checkpoint_cuts(c);
  return out;
}

zpipe::v1::WorkerMessage LogBatchToProto(const JobLogBatch& batch) {
  zpipe::v1::WorkerMessage message;
  zpipe::v1::JobLogBatch* out = message.mutable_log();
  out->set_job_id(batch.job_id);
  out->set_pipeline_rank(batch.pipeline_rank);
  out->set_data_rank(batch.data_rank);
  out->set_dropped_lines(batch.dropped_lines);
  for (const JobLogBatch::Line& line : batch.lines) {
    zpipe::v1::LogLine* l = out->add_lines();
    const int64_t seconds = absl::ToUnixSeconds(line.time);
    l->mutable_time()->set_seconds(seconds);
    l->mutable_time()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(line.time - absl::FromUnixSeconds(seconds))));
    l->set_text(line.text);
  }
  return message;
}

}  // namespace zpipe::worker
