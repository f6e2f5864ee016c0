#include "worker/model/synthetic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/model/internal/stage_base.h"
#include "worker/model/internal/torch_status.h"
#include "worker/model/weight_grad_store.h"

namespace zpipe::worker::model {
namespace {

using Clock = std::chrono::steady_clock;
using internal::GuardTorch;

constexpr int64_t kMaxTensorFloats = 1'000'000;  // 4 MB per parameter tensor

class SyntheticStage final : public internal::StageBase {
 public:
  SyntheticStage(const SyntheticStageConfig& config, const StageOptions& options)
      : StageBase(options), config_(config) {
    activation_floats_ = static_cast<int64_t>(std::llround(config.activation_kb * 1024.0 / 4.0));
    const int64_t total = static_cast<int64_t>(std::llround(config.params_mb * 1e6 / 4.0));
    const int64_t tensors =
        config.param_tensors > 0
            ? std::min<int64_t>(config.param_tensors, std::max<int64_t>(total, 1))
            : (total + kMaxTensorFloats - 1) / kMaxTensorFloats;
    torch::NoGradGuard no_grad;
    int64_t remaining = total;
    for (int k = 0; remaining > 0; ++k) {
      // Equal shares, the first tensors taking the remainder.
      const int64_t n = total / tensors + (k < total % tensors ? 1 : 0);
      remaining -= n;
      total_floats_ += n;
      torch::Tensor t =
          torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat32).device(options.device));
      t.set_requires_grad(true);
      infos_.push_back(ParamInfo{absl::StrCat("synthetic.stage", options.stage, ".p", k), t,
                                 GradPhase::kW, 1, k});
    }
  }

  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor*) override {
    const Clock::time_point start = Clock::now();
    if (forwarded_.count(mb)) {
      return absl::FailedPreconditionError(absl::StrCat("stage ", stage(), " F microbatch ", mb,
                                                        " forward state already held (F twice)"));
    }
    if (!is_first() && input.defined() && input.numel() != activation_floats_) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", stage(), " F microbatch ", mb,
                                                     " input has ", input.numel(),
                                                     " elements, want ", activation_floats_));
    }
    absl::StatusOr<torch::Tensor> out =
        GuardTorch(stage(), "F", mb, [&]() -> absl::StatusOr<torch::Tensor> {
          if (is_last()) {
            const float loss = 4.0f / (1.0f + 0.01f * static_cast<float>(forwards_++));
            losses_[mb] = torch::full({}, loss);
            return torch::full({}, loss, torch::TensorOptions().dtype(torch::kFloat32));
          }
          return torch::full({activation_floats_}, static_cast<float>(stage() + 1),
                             torch::TensorOptions().dtype(torch::kFloat32).device(options_.device));
        });
    if (out.ok()) forwarded_.insert({mb, true});
    WaitUntil(start, config_.forward_ms);
    return out;
  }

  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor&) override {
    const Clock::time_point start = Clock::now();
    if (!forwarded_.erase(mb)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage(), " B microbatch ", mb, " no forward state (B without F, or B twice)"));
    }
    if (absl::Status s = store_.Open(mb); !s.ok()) return s;
    absl::StatusOr<torch::Tensor> grad =
        GuardTorch(stage(), "B", mb, [&]() -> absl::StatusOr<torch::Tensor> {
          // One closure per tensor, last layer first, as a real backward produces them.
          for (int k = static_cast<int>(infos_.size()) - 1; k >= 0; --k) {
            absl::Status pushed = store_.Push(mb, [this, mb, k] { WeightWork(mb, k); }, {k});
            if (!pushed.ok()) return pushed;
          }
          if (infos_.empty()) {
            absl::Status pushed = store_.Push(mb, [this, mb] { WeightWork(mb, -1); });
            if (!pushed.ok()) return pushed;
          }
          if (is_first()) return torch::Tensor();
          return torch::full({activation_floats_}, static_cast<float>(-(stage() + 1)),
                             torch::TensorOptions().dtype(torch::kFloat32).device(options_.device));
        });
    if (!grad.ok()) store_.Drop(mb);
    WaitUntil(start, config_.backward_ms);
    return grad;
  }

  void FreeMicrobatch(int mb) override {
    forwarded_.erase(mb);
    w_pace_.erase(mb);
    DropQueued(mb);
  }
  int pending_microbatches() const override {
    return static_cast<int>(forwarded_.size()) + store_.pending_microbatches();
  }

  const std::vector<ParamInfo>& params() const override { return infos_; }

  TensorSpec InputSpec(int) const override {
    return TensorSpec{{activation_floats_}, torch::kFloat32};
  }
  TensorSpec OutputSpec(int) const override {
    return TensorSpec{{activation_floats_}, torch::kFloat32};
  }

 private:
  // weight_ms, or its drifted value in a slowed iteration.
  double WeightMs() const {
    const bool slowed =
        config_.iteration != nullptr &&
        config_.iteration->load(std::memory_order_relaxed) >= config_.w_slowdown_after;
    return slowed ? config_.weight_ms * config_.w_slowdown_factor : config_.weight_ms;
  }

  // Tensor k's part of microbatch mb's W (k = -1: a stage without parameters, all of weight_ms).
  // The parts are paced from the W's start: tensor k's part ends at that start plus the shares of
  // the parts run so far, so what runs between them (the gradient add, the gradient sync's
  // bucket launches, which on a GPU overlap the W kernels) does not add up over the tensors. Timed
  // from each part's own start, a 15 ms BW of 8 tensors ran 0.1-0.5 ms long.
  void WeightWork(int mb, int k) {
    const Clock::time_point start = Clock::now();
    if (k < 0) {
      WaitUntil(start, WeightMs());
      return;
    }
    auto [pace, fresh] = w_pace_.try_emplace(mb);
    if (fresh) pace->second = WPace{start, 0.0, static_cast<int>(infos_.size())};
    torch::NoGradGuard no_grad;
    const ParamInfo& p = infos_[k];
    const double inc = 1.0 / options_.num_microbatches;
    torch::Tensor& g = p.tensor.mutable_grad();
    if (g.defined()) {
      g.add_(inc);
    } else {
      g = torch::full_like(p.tensor, inc);
    }
    pace->second.done_ms +=
        WeightMs() * static_cast<double>(p.tensor.numel()) / static_cast<double>(total_floats_);
    // Only the W's end is waited for to the microsecond; a part's end within it may be a sleep's
    // overshoot late (spinning there for every part cost a fifth of a worker's CPU, which the
    // other ranks sharing the machine's cores then lacked).
    const bool last = --pace->second.parts_left == 0;
    WaitUntil(pace->second.start, pace->second.done_ms, /*precise=*/last);
    if (last) w_pace_.erase(pace);
  }

  // Returns at `start` + `ms`. With the sleep timing, a precise wait sleeps to just short of the
  // end and yield-spins the rest; an imprecise one only sleeps.
  void WaitUntil(Clock::time_point start, double ms, bool precise = true) const {
    const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double, std::milli>(ms));
    if (config_.timing == SyntheticStageConfig::Timing::kSleep) {
      // Sleep to just short of the end, then yield-spin the rest: a plain sleep_until overshoots
      // by 100-250 us on a busy machine (scripts/bench runtime), which adds up over a pipeline.
      constexpr auto kSpinTail = std::chrono::microseconds(200);
      if (!precise) {
        std::this_thread::sleep_until(end);
        return;
      }
      if (end - Clock::now() > kSpinTail) std::this_thread::sleep_until(end - kSpinTail);
      while (Clock::now() < end) std::this_thread::yield();
    } else {
      while (Clock::now() < end) {
      }
    }
  }

  const SyntheticStageConfig config_;
  int64_t activation_floats_ = 0;
  std::vector<ParamInfo> infos_;
  int64_t total_floats_ = 0;
  std::map<int, bool> forwarded_;
  // Per microbatch whose W is running: its start, the shares done, the parts still to run.
  struct WPace {
    Clock::time_point start;
    double done_ms = 0;
    int parts_left = 0;
  };
  std::map<int, WPace> w_pace_;
  int64_t forwards_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Stage>> MakeSyntheticStage(const SyntheticStageConfig& config,
                                                          const StageOptions& options) {
  auto negative = [](absl::string_view field, double v) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.synthetic.", field, ": ", v, " must be >= 0"));
  };
  if (!(config.forward_ms >= 0)) return negative("forward_ms", config.forward_ms);
  if (!(config.backward_ms >= 0)) return negative("backward_ms", config.backward_ms);
  if (!(config.weight_ms >= 0)) return negative("weight_ms", config.weight_ms);
  if (!(config.activation_kb >= 0)) return negative("activation_kb", config.activation_kb);
  if (!(config.params_mb >= 0)) return negative("params_mb", config.params_mb);
  if (config.param_tensors < 0) return negative("param_tensors", config.param_tensors);
  if (!(config.w_slowdown_factor > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic stage: w_slowdown factor must be > 0, got ", config.w_slowdown_factor));
  }
  if (options.num_stages < 1 || options.stage < 0 || options.stage >= options.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", options.stage, " not in 0..", options.num_stages - 1));
  }
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_microbatches ", options.num_microbatches, " must be >= 1"));
  }
  return GuardTorch(options.stage, "init", -1, [&]() -> absl::StatusOr<std::unique_ptr<Stage>> {
    return std::unique_ptr<Stage>(std::make_unique<SyntheticStage>(config, options));
  });
}

}  // namespace zpipe::worker::model
