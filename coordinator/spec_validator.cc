#include "coordinator/spec_validator.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/recompute.h"
#include "core/schedule.h"

namespace zpipe::coordinator {
namespace {

// The GPT section's checks are the worker's own (spec/gpt_config.h).
using ::zpipe::spec::ValidateGptConfig;

absl::Status Bad(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status IntIn(absl::string_view path, int value, int lo, int hi) {
  if (value < lo || value > hi) {
    return Bad(path, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// lo_open: the value must be > lo (else >= lo).
absl::Status DoubleIn(absl::string_view path, double value, double lo, double hi, bool lo_open) {
  if (!std::isfinite(value)) return Bad(path, absl::StrCat("must be a finite number, got ", value));
  if ((lo_open ? value <= lo : value < lo) || value > hi) {
    return Bad(path,
               absl::StrCat("must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

bool NameChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; }

#define ZPIPE_RETURN_IF_ERROR(expr)                    \
  do {                                                 \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

absl::Status ValidateSynthetic(const SyntheticConfig& s) {
  ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.model.synthetic.forward_ms", s.forward_ms, 0, 60000, true));
  ZPIPE_RETURN_IF_ERROR(
      DoubleIn("spec.model.synthetic.backward_ms", s.backward_ms, 0, 60000, true));
  ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.model.synthetic.weight_ms", s.weight_ms, 0, 60000, false));
  ZPIPE_RETURN_IF_ERROR(
      DoubleIn("spec.model.synthetic.activation_kb", s.activation_kb, 0, 1 << 20, false));
  ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.model.synthetic.params_mb", s.params_mb, 0, 1 << 20, false));
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.model.synthetic.param_tensors", s.param_tensors, 0, 65536));
  if (s.w_slowdown_factor != 0 || s.w_slowdown_after != 0) {
    ZPIPE_RETURN_IF_ERROR(IntIn("spec.model.synthetic.w_slowdown.after_iteration",
                                s.w_slowdown_after, 0, 1'000'000'000));
    ZPIPE_RETURN_IF_ERROR(
        DoubleIn("spec.model.synthetic.w_slowdown.factor", s.w_slowdown_factor, 0, 1000, true));
  }
  return absl::OkStatus();
}

// Paths the workers open: non-empty, bounded, no NUL.
absl::Status ValidatePath(absl::string_view field, const std::string& path) {
  if (path.empty()) return Bad(field, "is required");
  if (path.size() > 4096) return Bad(field, "must be at most 4096 characters");
  if (path.find('\0') != std::string::npos) return Bad(field, "must not contain NUL");
  return absl::OkStatus();
}

// `field`: "spec.model.torchscript.cuts" or "spec.model.python.cuts".
absl::Status ValidateCuts(absl::string_view field, const std::vector<int>& cuts, int num_stages) {
  if (cuts.empty()) return absl::OkStatus();
  if (static_cast<int>(cuts.size()) != num_stages - 1) {
    return Bad(field, absl::StrCat("needs pipeline x chunks - 1 = ", num_stages - 1,
                                   " block indices (where stages 1..", num_stages - 1,
                                   " begin), got ", cuts.size()));
  }
  for (size_t k = 0; k < cuts.size(); ++k) {
    const int lo = k == 0 ? 1 : cuts[k - 1] + 1;
    if (cuts[k] < lo) {
      return Bad(field, absl::StrCat("must be strictly increasing block indices >= 1; cuts[", k,
                                     "] = ", cuts[k]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTorchScript(const TorchScriptConfig& t, int num_stages) {
  ZPIPE_RETURN_IF_ERROR(ValidatePath("spec.model.torchscript.path", t.path));
  return ValidateCuts("spec.model.torchscript.cuts", t.cuts, num_stages);
}

// The factory is a Python identifier; args, when given, a JSON object (the job-file reader makes
// it from a map; an API client writes the text itself).
absl::Status ValidatePython(const PythonConfig& p, int num_stages) {
  ZPIPE_RETURN_IF_ERROR(ValidatePath("spec.model.python.file", p.file));
  const bool identifier =
      p.factory.size() <= 256 &&
      std::all_of(p.factory.begin(), p.factory.end(),
                  [](char c) { return absl::ascii_isalnum(c) || c == '_'; }) &&
      (p.factory.empty() || !absl::ascii_isdigit(p.factory[0]));
  if (!identifier) {
    return Bad("spec.model.python.factory",
               absl::StrCat("must be the name of a function in the file (a Python identifier), "
                            "got '", p.factory.substr(0, 64), "'"));
  }
  if (p.args.size() > 65536) return Bad("spec.model.python.args", "must be at most 64 KiB");
  if (!p.args.empty()) {
    const nlohmann::json args = nlohmann::json::parse(p.args, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) {
      return Bad("spec.model.python.args",
                 "must be a JSON object of the factory's keyword arguments");
    }
  }
  if (!(p.compile.empty() || p.compile == "none" || p.compile == "trace" ||
        p.compile == "script")) {
    return Bad("spec.model.python.compile",
               absl::StrCat("unknown compile mode '", p.compile.substr(0, 64),
                            "' (expected none, trace or script)"));
  }
  return ValidateCuts("spec.model.python.cuts", p.cuts, num_stages);
}

absl::Status ValidateData(const JobSpec& spec) {
  const DataConfig& d = spec.data_file;
  const bool has_data = d != DataConfig{};
  const auto* gpt = std::get_if<GptConfig>(&spec.model);
  if (std::holds_alternative<TorchScriptConfig>(spec.model) && !has_data) {
    return Bad("spec.data", "is required for torchscript models (a token file: data.path)");
  }
  if (std::holds_alternative<PythonConfig>(spec.model) && !has_data) {
    return Bad("spec.data", "is required for python models (a token file: data.path)");
  }
  if (std::holds_alternative<SyntheticConfig>(spec.model) && has_data) {
    return Bad("spec.data", "synthetic models take no data; remove the data section");
  }
  if (has_data) {
    ZPIPE_RETURN_IF_ERROR(ValidatePath("spec.data.path", d.path));
    if (!(d.dtype.empty() || d.dtype == "uint16" || d.dtype == "uint32")) {
      return Bad("spec.data.dtype",
                 absl::StrCat("must be uint16 or uint32, got '", d.dtype.substr(0, 64), "'"));
    }
    if (gpt != nullptr) {
      if (d.seq_len != 0 && d.seq_len != gpt->seq_len) {
        return Bad("spec.data.seq_len", absl::StrCat("must equal model.gpt.seq_len (", gpt->seq_len,
                                                     ") or be left 0, got ", d.seq_len));
      }
    } else {
      ZPIPE_RETURN_IF_ERROR(IntIn("spec.data.seq_len", d.seq_len, 1, 1 << 20));
    }
  }
  const EvalConfig& e = spec.eval;
  if (e != EvalConfig{}) {
    if (!has_data)
      return Bad("spec.eval", "needs a data section (eval uses its dtype and seq_len)");
    ZPIPE_RETURN_IF_ERROR(ValidatePath("spec.eval.path", e.path));
    ZPIPE_RETURN_IF_ERROR(IntIn("spec.eval.every", e.every, 1, 10'000'000));
    ZPIPE_RETURN_IF_ERROR(IntIn("spec.eval.batches", e.batches, 0, 100'000));
  }
  return absl::OkStatus();
}

absl::Status ValidateTrain(const JobSpec& spec) {
  const TrainSettings& t = spec.train;
  if (t.weight_decay) {
    ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.train.weight_decay", *t.weight_decay, 0, 10, false));
  }
  if (!t.betas.empty()) {
    if (t.betas.size() != 2) {
      return Bad("spec.train.betas",
                 absl::StrCat("needs two values [beta1, beta2], got ", t.betas.size()));
    }
    for (double b : t.betas) {
      if (!std::isfinite(b) || b < 0 || b >= 1) {
        return Bad("spec.train.betas", absl::StrCat("each must be in [0, 1), got ", b));
      }
    }
  }
  if (t.eps) ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.train.eps", *t.eps, 0, 1, true));
  if (t.clip_grad_norm) {
    ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.train.clip_grad_norm", *t.clip_grad_norm, 0, 1e9, false));
  }
  if (!(t.precision.empty() || t.precision == "fp32" || t.precision == "bf16")) {
    return Bad("spec.train.precision",
               absl::StrCat("unknown precision '", t.precision.substr(0, 64),
                            "' (expected fp32 or bf16)"));
  }
  if (t.warmup < 0 || (t.warmup > 0 && t.warmup >= spec.iterations)) {
    return Bad("spec.train.lr_schedule.warmup", absl::StrCat("must be in [0, iterations) = [0, ",
                                                             spec.iterations, "), got ", t.warmup));
  }
  if (!(t.decay.empty() || t.decay == "constant" || t.decay == "cosine" || t.decay == "linear")) {
    return Bad("spec.train.lr_schedule.decay",
               absl::StrCat("unknown decay '", t.decay.substr(0, 64),
                            "' (expected constant, cosine or linear)"));
  }
  if (!std::isfinite(t.min_lr) || t.min_lr < 0 || t.min_lr > spec.lr) {
    return Bad("spec.train.lr_schedule.min_lr",
               absl::StrCat("must be in [0, lr = ", spec.lr, "], got ", t.min_lr));
  }
  return absl::OkStatus();
}

absl::Status ValidateName(const JobSpec& spec) {
  if (spec.name.empty() || spec.name.size() > 128) {
    return Bad("spec.name", absl::StrCat("must be 1..128 characters, got ", spec.name.size()));
  }
  for (char c : spec.name) {
    if (!NameChar(c)) return Bad("spec.name", "may only contain A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const JobSpec& spec) {
  constexpr size_t kMaxLabels = 32, kMaxLength = 63;
  if (spec.labels.size() > kMaxLabels) {
    return Bad("spec.labels", absl::StrCat("at most ", kMaxLabels, " labels, got ",
                                           spec.labels.size()));
  }
  for (const auto& [key, value] : spec.labels) {
    const bool key_ok =
        !key.empty() && key.size() <= kMaxLength &&
        std::all_of(key.begin(), key.end(), [](char c) { return NameChar(c) || c == '/'; });
    if (!key_ok) {
      return Bad("spec.labels", absl::StrCat("label key '", absl::CHexEscape(key.substr(0, 64)),
                                             "' must be 1..63 characters of A-Z, a-z, 0-9, '.', "
                                             "'_', '/' and '-'"));
    }
    const bool value_ok =
        value.size() <= kMaxLength &&
        std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (!value_ok) {
      return Bad(absl::StrCat("spec.labels.", key),
                 "the value must be at most 63 printable ASCII characters");
    }
  }
  return absl::OkStatus();
}

// Parallelism and schedule; returns the chunks per rank (v) of the schedule's placement, which
// the model and batch checks need.
absl::StatusOr<int> ValidateParallelAndSchedule(const JobSpec& spec) {
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.parallel.pipeline", spec.pipeline, 1, kMaxPipeline));
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.parallel.data", spec.data, 0, kMaxData));
  if (spec.world_size() > kMaxWorldSize) {
    return Bad("spec.parallel.data", absl::StrCat("pipeline x data = ", spec.world_size(),
                                                  " exceeds ", kMaxWorldSize, " workers"));
  }
  if (spec.schedule.empty()) return Bad("spec.schedule.kind", "is required");
  absl::StatusOr<core::ScheduleKind> kind = core::ParseScheduleKind(spec.schedule);
  if (!kind.ok()) return Bad("spec.schedule.kind", kind.status().message());
  if (*kind == core::ScheduleKind::kInterleaved1F1B) {
    if (spec.chunks != 0)
      ZPIPE_RETURN_IF_ERROR(IntIn("spec.schedule.chunks", spec.chunks, 2, core::kMaxChunks));
  } else if (spec.chunks != 0) {
    return Bad("spec.schedule.chunks",
               absl::StrCat("only 'interleaved' takes chunks; ", spec.schedule,
                            " has a fixed number, leave it 0 (got ", spec.chunks, ")"));
  }
  if (spec.memory_limit.has_value()) {
    ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.schedule.memory_limit", *spec.memory_limit, 0, 1e6, true));
  }
  if (!spec.recompute.empty()) {
    if (absl::StatusOr<core::RecomputePolicy> policy = core::ParseRecomputePolicy(spec.recompute);
        !policy.ok()) {
      return Bad("spec.schedule.recompute", policy.status().message());
    }
  }
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.schedule.replan_every", spec.replan_every, 0, 1'000'000));
  if (spec.replan_threshold.has_value()) {
    ZPIPE_RETURN_IF_ERROR(
        DoubleIn("spec.schedule.replan_threshold", *spec.replan_threshold, 0, 1, false));
  }
  if (spec.search_budget.has_value()) {
    ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.schedule.search_budget", *spec.search_budget, 0,
                                   JobSpec::kMaxSearchBudget, false));
  }
  return core::PlacementFor(*kind, spec.pipeline, spec.chunks).chunks_per_rank();
}

// Exactly one model section, for `num_stages` stages, and the data it trains on.
absl::Status ValidateModel(const JobSpec& spec, int num_stages) {
  if (std::holds_alternative<std::monostate>(spec.model)) {
    return Bad("spec.model", "one of gpt, synthetic, torchscript or python is required");
  }
  if (const auto* gpt = std::get_if<GptConfig>(&spec.model)) {
    ZPIPE_RETURN_IF_ERROR(ValidateGptConfig(*gpt, num_stages));
  } else if (const auto* ts = std::get_if<TorchScriptConfig>(&spec.model)) {
    ZPIPE_RETURN_IF_ERROR(ValidateTorchScript(*ts, num_stages));
  } else if (const auto* py = std::get_if<PythonConfig>(&spec.model)) {
    ZPIPE_RETURN_IF_ERROR(ValidatePython(*py, num_stages));
  } else {
    ZPIPE_RETURN_IF_ERROR(ValidateSynthetic(std::get<SyntheticConfig>(spec.model)));
  }
  return ValidateData(spec);
}

// `v`: chunks per rank.
absl::Status ValidateBatch(const JobSpec& spec, int v) {
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.batch.microbatches", spec.microbatches, 1, kMaxMicrobatches));
  if (static_cast<int64_t>(spec.pipeline) * v * spec.microbatches > kMaxStageMicrobatches) {
    return Bad("spec.batch.microbatches",
               absl::StrCat("pipeline x chunks x microbatches = ",
                            static_cast<int64_t>(spec.pipeline) * v * spec.microbatches,
                            " exceeds ", kMaxStageMicrobatches));
  }
  return IntIn("spec.batch.microbatch_size", spec.microbatch_size, 1, 65536);
}

absl::Status ValidateIterationsAndOptimizer(const JobSpec& spec) {
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.train.iterations", spec.iterations, 1, 10'000'000));
  if (!(spec.optimizer.empty() || spec.optimizer == "sgd" || spec.optimizer == "adam" ||
        spec.optimizer == "adamw")) {
    return Bad("spec.train.optimizer",
               absl::StrCat("unknown optimizer '", spec.optimizer.substr(0, 64),
                            "' (expected sgd, adam or adamw)"));
  }
  return DoubleIn("spec.train.lr", spec.lr, 0, 10, true);
}

absl::Status ValidateCheckpointAndRestart(const JobSpec& spec) {
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.checkpoint.every", spec.checkpoint_every, 0, 10'000'000));
  if (spec.checkpoint_every > 0 && spec.checkpoint_dir.empty()) {
    return Bad("spec.checkpoint.dir", "is required when checkpoint.every > 0");
  }
  if (spec.checkpoint_dir.size() > 4096) {
    return Bad("spec.checkpoint.dir", "must be at most 4096 characters");
  }
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.checkpoint.keep", spec.checkpoint_keep, 0, 1'000'000));
  ZPIPE_RETURN_IF_ERROR(IntIn("spec.restart.max_restarts", spec.max_restarts, 0, 1000));
  if (absl::StatusOr<absl::Duration> backoff = RestartBackoff(spec); !backoff.ok()) {
    return backoff.status();
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ValidateJobId(absl::string_view id) {
  if (id.empty() || id.size() > 64) {
    return Bad("job_id", absl::StrCat("must be 1..64 characters, got ", id.size()));
  }
  if (!absl::ascii_isalnum(id[0])) return Bad("job_id", "must start with a letter or digit");
  for (char c : id) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' || c == '_' || c == '-')) {
      return Bad("job_id", "may only contain a-z, 0-9, '.', '_' and '-'");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSpecFields(const JobSpec& spec) {
  ZPIPE_RETURN_IF_ERROR(ValidateName(spec));
  ZPIPE_RETURN_IF_ERROR(ValidateLabels(spec));
  // Parallelism and schedule first: the model checks need p * v.
  absl::StatusOr<int> v = ValidateParallelAndSchedule(spec);
  if (!v.ok()) return v.status();
  ZPIPE_RETURN_IF_ERROR(ValidateModel(spec, spec.pipeline * *v));
  ZPIPE_RETURN_IF_ERROR(ValidateBatch(spec, *v));
  ZPIPE_RETURN_IF_ERROR(ValidateIterationsAndOptimizer(spec));
  ZPIPE_RETURN_IF_ERROR(ValidateTrain(spec));
  ZPIPE_RETURN_IF_ERROR(DoubleIn("spec.grad_sync.bucket_mb", spec.bucket_mb, 0, 4096, false));
  return ValidateCheckpointAndRestart(spec);
}

}  // namespace zpipe::coordinator
