#include "coordinator/spec_defaults.h"

#include <string>
#include <variant>

#include "core/schedule.h"

namespace zpipe::coordinator {

JobSpec ResolveSpecDefaults(JobSpec spec) {
  if (spec.data == 0) spec.data = 1;
  if (auto* python = std::get_if<PythonConfig>(&spec.model)) {
    if (python->factory.empty()) python->factory = "build_model";
    if (python->compile.empty()) python->compile = "none";
  }
  absl::StatusOr<core::ScheduleKind> kind = core::ParseScheduleKind(spec.schedule);
  if (kind.ok()) {
    // Aliases ("zbv", "interleaved-1f1b") by their one name, so the same job compares equal.
    spec.schedule = std::string(core::ScheduleName(*kind));
    if (*kind == core::ScheduleKind::kInterleaved1F1B && spec.chunks == 0) spec.chunks = 2;
  }
  if (spec.optimizer.empty()) spec.optimizer = "adamw";
  const bool adam = spec.optimizer == "adam" || spec.optimizer == "adamw";
  TrainSettings& t = spec.train;
  if (!t.weight_decay) t.weight_decay = spec.optimizer == "adamw" ? 0.01 : 0.0;
  if (adam && t.betas.empty()) t.betas = {0.9, 0.999};
  if (adam && !t.eps) t.eps = 1e-8;
  if (!t.clip_grad_norm) t.clip_grad_norm = 1.0;
  if (t.decay.empty()) t.decay = "constant";
  if (t.precision.empty()) t.precision = "fp32";
  spec.bucket_mb = spec.bucket_mb_or_default();
  spec.overlap = spec.overlap_or_default();
  // A section is there when any of its fields is set (the validator's reading, ValidateData).
  if (spec.data_file != DataConfig{}) {
    if (spec.data_file.dtype.empty()) spec.data_file.dtype = "uint16";
    const auto* gpt = std::get_if<GptConfig>(&spec.model);
    if (spec.data_file.seq_len == 0 && gpt != nullptr) spec.data_file.seq_len = gpt->seq_len;
  }
  if (spec.eval != EvalConfig{} && spec.eval.batches == 0) spec.eval.batches = 4;
  if (spec.checkpoint_on_error == CheckpointOnError::kUnset) {
    spec.checkpoint_on_error = CheckpointOnError::kFail;
  }
  if (spec.restart_backoff.empty()) spec.restart_backoff = "2s";
  spec.replan_threshold = spec.replan_threshold_or_default();
  spec.search_budget = spec.search_budget_or_default();
  spec.polish = spec.polish_or_default();
  return spec;
}

}  // namespace zpipe::coordinator
