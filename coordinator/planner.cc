#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "core/validator.h"

namespace zpipe::coordinator {
namespace {

// Rough sustained throughputs for FLOP-proportional estimates; only ratios matter for schedules.
constexpr double kCpuFlopsPerMs = 50e9 / 1e3;
constexpr double kCudaFlopsPerMs = 100e12 / 1e3;
constexpr double kLinkBytesPerMs = 1e9 / 1e3;  // P2P and all-reduce bandwidth, 1 GB/s

struct StageShape {
  double forward_ms, backward_ms, weight_ms, activation_kb, params_mb;
};

StageShape ShapeFor(const JobSpec& spec, int num_stages, int v) {
  if (const auto* s = std::get_if<SyntheticConfig>(&spec.model)) {
    return {s->forward_ms / v, s->backward_ms / v, s->weight_ms / v, s->activation_kb,
            s->params_mb / v};
  }
  if (std::holds_alternative<TorchScriptConfig>(spec.model)) {
    // Unknown until measured: unit costs (B and W as long as F) and one bucket per stage.
    return {1, 1, 1, 0, 0};
  }
  const auto& g = std::get<GptConfig>(spec.model);
  const double b = spec.microbatch_size, s = g.seq_len, h = g.hidden;
  const double layers = static_cast<double>(g.layers) / num_stages;
  // Per layer forward: 24 b s h^2 (QKV, projection, MLP) + 4 b s^2 h (attention scores).
  const double flops = layers * (24 * b * s * h * h + 4 * b * s * s * h);
  const double rate = spec.device == DeviceKind::kCuda ? kCudaFlopsPerMs : kCpuFlopsPerMs;
  const double f = flops / rate;
  // B (input grad) and W (weight grad) each cost about one forward.
  return {f, f, f, b * s * h * 4 / 1024.0, layers * 12 * h * h * 4 / 1e6};
}

// Gradient buckets per stage, as the workers will pack them (worker/grad_sync PackBuckets: whole
// tensors, up to bucket_mb MiB each). Synthetic stages have equal tensors, so this is exact; for
// GPT stages it is the size ratio.
int BucketsPerStage(const JobSpec& spec, const StageShape& shape, double bucket_mb) {
  const double bucket_bytes = bucket_mb * (1 << 20);
  const double stage_bytes = std::max(shape.params_mb, 0.0) * 1e6;
  if (const auto* s = std::get_if<SyntheticConfig>(&spec.model); s != nullptr && stage_bytes > 0) {
    const double floats = std::round(stage_bytes / 4);
    const double tensors =
        s->param_tensors > 0 ? std::min<double>(s->param_tensors, floats) : std::ceil(floats / 1e6);
    const double tensor_bytes = std::ceil(floats / tensors) * 4;
    const double per_bucket = std::max(1.0, std::floor(bucket_bytes / tensor_bytes));
    return std::max(1, static_cast<int>(std::ceil(tensors / per_bucket)));
  }
  return std::max(1, static_cast<int>(std::ceil(shape.params_mb / bucket_mb)));
}

absl::Status ScheduleError(const JobSpec& spec, const absl::Status& st) {
  if (st.code() == absl::StatusCode::kUnimplemented) {
    return absl::InvalidArgumentError(absl::StrCat("spec.schedule.kind: '", spec.schedule,
                                                   "' is not available in this build (",
                                                   st.message(), ")"));
  }
  const std::string msg(st.message());
  absl::string_view path = "spec.schedule.kind";
  if (absl::StrContains(msg, "memory")) {
    path = spec.memory_limit.has_value() ? "spec.schedule.memory_limit" : "spec.schedule.kind";
  } else if (absl::StrContains(msg, "microbatch")) {
    path = "spec.batch.microbatches";
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", msg));
}

absl::Status Internal(absl::string_view step, const absl::Status& st) {
  return absl::InternalError(absl::StrCat("planner: ", step, ": ", st.message()));
}

}  // namespace

core::CostModel CostModelFor(const JobSpec& spec, int num_stages, int v) {
  const StageShape shape = ShapeFor(spec, num_stages, v);
  core::StageCost c;
  c.f = shape.forward_ms;
  c.b = shape.backward_ms;
  c.w = shape.weight_ms;
  c.mem_f = 1.0 / v;
  c.mem_b = 0;
  c.mem_w = -c.mem_f;
  const double comm = shape.activation_kb * 1024.0 / kLinkBytesPerMs;
  return core::CostModel::Uniform(num_stages, c, comm);
}

absl::StatusOr<std::shared_ptr<const JobPlan>> PlanJob(const JobSpec& spec,
                                                       const ModelLayout* layout) {
  absl::StatusOr<core::ScheduleKind> kind = core::ParseScheduleKind(spec.schedule);
  if (!kind.ok()) return ScheduleError(spec, kind.status());
  const core::Placement placement = core::PlacementFor(*kind, spec.pipeline, spec.chunks);
  const int stages = placement.num_stages();
  const int v = placement.chunks_per_rank();

  auto out = std::make_shared<JobPlan>();
  out->cost = CostModelFor(spec, stages, v);
  StageShape shape = ShapeFor(spec, stages, v);
  out->stages.assign(stages, StageInfo{shape.activation_kb, shape.params_mb});
  if (layout != nullptr && static_cast<int>(layout->stages.size()) == stages &&
      layout->stages[0].forward_ms > 0) {
    // Measured: per-stage times; communication from the largest boundary activation.
    double max_activation_kb = 0, max_params_mb = 0;
    for (int s = 0; s < stages; ++s) {
      const ModelLayout::Stage& m = layout->stages[s];
      core::StageCost& c = out->cost.stages[s];
      c.f = std::max(m.forward_ms, 1e-3);
      c.b = std::max(m.backward_ms, 1e-3);
      c.w = std::max(m.weight_ms, 0.0);
      out->stages[s] = StageInfo{m.activation_kb, m.params_mb};
      max_activation_kb = std::max(max_activation_kb, m.activation_kb);
      max_params_mb = std::max(max_params_mb, m.params_mb);
    }
    const double comm = max_activation_kb * 1024.0 / kLinkBytesPerMs;
    out->cost.comm = comm;
    shape.activation_kb = max_activation_kb;
    shape.params_mb = max_params_mb;
  }

  core::ScheduleRequest req;
  req.pipeline = spec.pipeline;
  req.microbatches = spec.microbatches;
  req.chunks = spec.chunks;
  req.cost = out->cost;
  req.memory_limit = spec.memory_limit;
  out->memory_limit = spec.memory_limit.value_or(
      core::DefaultMemoryLimit(*kind, spec.pipeline, spec.microbatches, out->cost));
  absl::StatusOr<core::Plan> compute = core::GenerateSchedule(*kind, req);
  if (!compute.ok()) return ScheduleError(spec, compute.status());

  core::ValidateOptions vopts;
  vopts.cost = &out->cost;
  vopts.memory_limit = out->memory_limit;
  if (absl::Status st = core::ValidatePlan(*compute, vopts); !st.ok()) {
    return Internal("generated plan invalid", st);
  }
  absl::StatusOr<core::Plan> lowered = core::LowerComm(*compute);
  if (!lowered.ok()) return Internal("comm lowering", lowered.status());

  out->bucket_size_mb = spec.bucket_mb_or_default();
  const int buckets = BucketsPerStage(spec, shape, out->bucket_size_mb);
  absl::StatusOr<core::GradSyncPlan> synced = core::PlanGradSync(
      *lowered, core::GradSyncLayout::Uniform(stages, buckets), spec.overlap_or_default());
  if (!synced.ok()) return Internal("grad-sync planning", synced.status());
  if (absl::Status st = core::ValidatePlan(synced->plan, vopts); !st.ok()) {
    return Internal("final plan invalid", st);
  }
  out->plan = std::move(synced->plan);
  out->buckets = std::move(synced->buckets);
  out->overlap = spec.overlap_or_default();

  core::SimOptions sopts;
  const int d = spec.data_parallel();
  const double bucket_mb = std::max(shape.params_mb, 0.0) / buckets;
  // Ring all-reduce moves 2 (d-1)/d of the bucket; nothing to reduce without data parallelism.
  sopts.reduce_cost = d > 1 ? bucket_mb * 1e6 / kLinkBytesPerMs * 2.0 * (d - 1) / d : 0;
  sopts.release_during_w = out->overlap;
  absl::StatusOr<core::SimResult> sim = core::Simulate(out->plan, out->cost, sopts);
  if (!sim.ok()) return Internal("simulation", sim.status());
  out->sim = std::move(*sim);
  out->text = core::PlanToText(out->plan);
  return std::shared_ptr<const JobPlan>(std::move(out));
}

}  // namespace zpipe::coordinator
