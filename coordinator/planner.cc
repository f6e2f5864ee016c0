#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/planning.h"
#include "core/status_field.h"
#include "spec/gpt_config.h"

namespace zpipe::coordinator {
namespace {

// Rough sustained throughputs for FLOP-proportional estimates; only ratios matter for schedules.
constexpr double kCpuFlopsPerMs = 50e9 / 1e3;
constexpr double kCudaFlopsPerMs = 100e12 / 1e3;
constexpr double kLinkBytesPerMs = 1e9 / 1e3;  // P2P and all-reduce bandwidth, 1 GB/s
// The search seed: `zpipe plan --seed`'s default.
constexpr uint64_t kSearchSeed = 1;

struct StageShape {
  double forward_ms, backward_ms, weight_ms, activation_kb, params_mb;
};

// Stage `stage` of `num_stages` (v per rank).
StageShape ShapeFor(const JobSpec& spec, int num_stages, int v, int stage) {
  if (const auto* s = std::get_if<SyntheticConfig>(&spec.model)) {
    return {s->forward_ms / v, s->backward_ms / v, s->weight_ms / v, s->activation_kb,
            s->params_mb / v};
  }
  if (BlockModelCuts(spec) != nullptr) {
    // Unknown until measured: unit costs (B and W as long as F) and one bucket per stage.
    return {1, 1, 1, 0, 0};
  }
  const auto& g = std::get<GptConfig>(spec.model);
  const double b = spec.microbatch_size, s = g.seq_len, h = g.hidden;
  // The worker's split (spec::StageLayers): L need not be a multiple of S, and then the first
  // L % S stages hold one layer more and cost that much more.
  const double layers = spec::StageLayers(g.layers, num_stages, stage).size();
  // Per layer forward: 24 b s h^2 (QKV, projection, MLP) + 4 b s^2 h (attention scores).
  const double flops = layers * (24 * b * s * h * h + 4 * b * s * s * h);
  const double rate = spec.device == DeviceKind::kCuda ? kCudaFlopsPerMs : kCpuFlopsPerMs;
  const double f = flops / rate;
  // B (input grad) and W (weight grad) each cost about one forward.
  return {f, f, f, b * s * h * 4 / 1024.0, layers * 12 * h * h * 4 / 1e6};
}

// What a recomputed forward of `stage` keeps until its R (its input), as a share of the
// activations a kept forward holds: an estimate. For GPT stages, per layer about
// 34 b s h + 5 a b s^2 bytes at 16 bits (Korthikanti et al., "Reducing Activation Recomputation
// in Large Transformer Models"), against the input's b s h values: 1 / (L (17 + 2.5 a s / h)).
// Other models' per-stage activations are not known before they run: a half.
double KeptShare(const JobSpec& spec, int num_stages, int stage) {
  const auto* g = std::get_if<GptConfig>(&spec.model);
  if (g == nullptr || g->hidden <= 0) return 0.5;
  const double layers = spec::StageLayers(g->layers, num_stages, stage).size();
  const double per_layer = 17 + 2.5 * g->heads * g->seq_len / static_cast<double>(g->hidden);
  return layers > 0 ? 1 / (layers * per_layer) : 1;
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

// The job-spec path of a core::PlanRequest field (core::ErrorField). Costs, buckets and the
// reduce time are derived from the model section.
std::string SpecPath(const JobSpec& spec, absl::string_view field) {
  const absl::string_view root = core::FieldRoot(field);
  if (root == "pipeline") return "spec.parallel.pipeline";
  if (root == "microbatches") return "spec.batch.microbatches";
  if (root == "chunks") return "spec.schedule.chunks";
  if (root == "memory_limit") {
    // A default limit is the schedule's: too low means the schedule cannot serve this model.
    return spec.memory_limit.has_value() ? "spec.schedule.memory_limit" : "spec.schedule.kind";
  }
  if (root == "cost" || root == "buckets_per_stage" || root == "reduce_cost") return "spec.model";
  if (root == "search") return "spec.schedule.search_budget";
  return "spec.schedule.kind";
}

// A planning error as the spec validator words them: InvalidArgument naming the spec field; a
// plan core itself rejects (no field) stays Internal, a bug rather than a user error.
absl::Status PlanningError(const JobSpec& spec, const absl::Status& st) {
  if (st.code() == absl::StatusCode::kUnimplemented) {
    return absl::InvalidArgumentError(absl::StrCat("spec.schedule.kind: '", spec.schedule,
                                                   "' is not available in this build (",
                                                   st.message(), ")"));
  }
  const std::string field = core::ErrorField(st);
  if (field.empty()) return absl::InternalError(absl::StrCat("planner: ", st.message()));
  return absl::InvalidArgumentError(absl::StrCat(SpecPath(spec, field), ": ", st.message()));
}

}  // namespace

core::CostModel CostModelFor(const JobSpec& spec, int num_stages, int v) {
  core::CostModel cost;
  // Every stage's output activation has the same size, so one communication cost.
  cost.comm = ShapeFor(spec, num_stages, v, 0).activation_kb * 1024.0 / kLinkBytesPerMs;
  for (int s = 0; s < num_stages; ++s) {
    const StageShape shape = ShapeFor(spec, num_stages, v, s);
    core::StageCost c;
    c.f = shape.forward_ms;
    c.b = shape.backward_ms;
    c.w = shape.weight_ms;
    c.mem_f = 1.0 / v;
    c.mem_b = 0;
    c.mem_w = -c.mem_f;
    c.mem_keep = c.mem_f * KeptShare(spec, num_stages, s);
    cost.stages.push_back(c);
  }
  return cost;
}

absl::StatusOr<std::shared_ptr<const JobPlan>> PlanJob(const JobSpec& spec,
                                                       const ModelLayout* layout,
                                                       absl::Span<const PlanStageCost> costs,
                                                       int version) {
  auto out = std::make_shared<JobPlan>();
  core::PlanRequest req;
  req.schedule = spec.schedule;
  req.pipeline = spec.pipeline;
  req.microbatches = spec.microbatches;
  req.chunks = spec.chunks;
  req.memory_limit = spec.memory_limit;
  // Validated (spec_validator.cc); "" is off.
  req.recompute =
      core::ParseRecomputePolicy(spec.recompute.empty() ? "off" : spec.recompute).value_or(
          core::RecomputePolicy::kOff);
  // `zpipe plan`'s search, with its default seed: the job runs the plan `zpipe plan` shows.
  req.search = {.budget_seconds = spec.search_budget_or_default(), .seed = kSearchSeed};
  // And its polish; false for a job stored before plans were polished (JobLifecycle::Restore).
  req.polish = spec.polish_or_default();
  req.lower = true;
  req.overlap = spec.overlap_or_default();
  out->bucket_size_mb = spec.bucket_mb_or_default();
  // Costs, stage sizes and buckets depend on the placement's stages (S = p * v).
  req.inputs = [&spec, layout, costs, &out](const core::Placement& placement) {
    const int stages = placement.num_stages();
    const int v = placement.chunks_per_rank();
    core::PlanInputs in;
    in.cost = CostModelFor(spec, stages, v);
    out->stages.clear();
    for (int s = 0; s < stages; ++s) {
      const StageShape stage_shape = ShapeFor(spec, stages, v, s);
      out->stages.push_back(StageInfo{stage_shape.activation_kb, stage_shape.params_mb});
    }
    // Buckets and the reduce time follow the largest stage, the first (StageLayers).
    StageShape shape = ShapeFor(spec, stages, v, 0);
    if (layout != nullptr && static_cast<int>(layout->stages.size()) == stages &&
        layout->stages[0].forward_ms > 0) {
      // Measured: per-stage times; communication from the largest boundary activation.
      double max_activation_kb = 0, max_params_mb = 0;
      for (int s = 0; s < stages; ++s) {
        const ModelLayout::Stage& m = layout->stages[s];
        core::StageCost& c = in.cost.stages[s];
        c.f = std::max(m.forward_ms, 1e-3);
        c.b = std::max(m.backward_ms, 1e-3);
        c.w = std::max(m.weight_ms, 0.0);
        out->stages[s] = StageInfo{m.activation_kb, m.params_mb};
        max_activation_kb = std::max(max_activation_kb, m.activation_kb);
        max_params_mb = std::max(max_params_mb, m.params_mb);
      }
      in.cost.comm = max_activation_kb * 1024.0 / kLinkBytesPerMs;
      shape.activation_kb = max_activation_kb;
      shape.params_mb = max_params_mb;
    }
    out->model_cost = in.cost;
    if (static_cast<int>(costs.size()) == stages) {
      for (const PlanStageCost& c : costs) {
        if (c.stage < 0 || c.stage >= stages) continue;
        core::StageCost& sc = in.cost.stages[c.stage];
        sc.f = c.forward_ms;
        sc.b = c.backward_ms;
        sc.w = c.weight_ms;
      }
    }
    in.buckets_per_stage = BucketsPerStage(spec, shape, out->bucket_size_mb);
    const int d = spec.data_parallel();
    const double bucket_mb = std::max(shape.params_mb, 0.0) / in.buckets_per_stage;
    // Ring all-reduce moves 2 (d-1)/d of the bucket; nothing to reduce without data parallelism.
    in.reduce_cost = d > 1 ? bucket_mb * 1e6 / kLinkBytesPerMs * 2.0 * (d - 1) / d : 0;
    return in;
  };
  absl::StatusOr<core::PlannedSchedule> planned = core::PlanSchedule(req);
  if (!planned.ok()) return PlanningError(spec, planned.status());
  out->plan = std::move(planned->plan);
  out->cost = std::move(planned->cost);
  out->buckets = std::move(planned->buckets);
  out->overlap = req.overlap;
  out->memory_limit = planned->memory_limit;
  out->sim = std::move(planned->sim);
  out->text = core::PlanToText(out->plan);
  out->version = version;
  return std::shared_ptr<const JobPlan>(std::move(out));
}

}  // namespace zpipe::coordinator
