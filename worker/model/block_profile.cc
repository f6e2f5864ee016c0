#include "worker/model/block_profile.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "worker/model/boundary.h"
#include "worker/model/split_backward.h"

namespace zpipe::worker::model {
namespace {

constexpr uint64_t kSeed = 0x5eed'b10c;  // token ids, targets and output gradients
using core::ActionKind;

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Bytes(const torch::Tensor& t) {
  return static_cast<double>(t.numel()) * static_cast<double>(t.element_size());
}

// Everything of `model` a profiling run may touch, put back on destruction (every return path):
// each parameter's .grad (the tensor object itself, so views into bucket buffers survive) and
// requires_grad, buffer values, and the default CPU generator's state.
class TrainingStateGuard {
 public:
  explicit TrainingStateGuard(BlockModel& model) {
    torch::NoGradGuard no_grad;
    std::set<const c10::TensorImpl*> seen;
    for (int k = 0; k < model.num_blocks(); ++k) {
      for (const auto& [name, p] : model.BlockParameters(k)) {
        if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
        params_.push_back(Param{p, p.grad(), p.requires_grad()});
        torch::Tensor(p).mutable_grad() = torch::Tensor();
      }
      for (const torch::Tensor& b : model.BlockBuffers(k)) {
        if (!b.defined() || !seen.insert(b.unsafeGetTensorImpl()).second) continue;
        buffers_.emplace_back(b, b.clone());
      }
    }
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng_state_ = gen.get_state();
  }
  ~TrainingStateGuard() {
    torch::NoGradGuard no_grad;
    for (Param& p : params_) {
      p.tensor.mutable_grad() = p.grad;
      p.tensor.requires_grad_(p.requires_grad);
    }
    for (auto& [buffer, saved] : buffers_) buffer.copy_(saved);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng_state_);
  }
  TrainingStateGuard(const TrainingStateGuard&) = delete;
  TrainingStateGuard& operator=(const TrainingStateGuard&) = delete;

 private:
  struct Param {
    torch::Tensor tensor;
    torch::Tensor grad;
    bool requires_grad;
  };
  std::vector<Param> params_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers_;
  torch::Tensor rng_state_;
};

struct BlockRun {
  double f_ms = 0, b_ms = 0, w_ms = 0;
  std::vector<torch::Tensor> output;  // detached: the next block's inputs
};

class BlockProfiler {
 public:
  BlockProfiler(BlockModel& model, int k, std::vector<torch::Tensor> params)
      : model_(model), k_(k), params_(std::move(params)) {}

  // F, B and W of one microbatch; `xs`: the previous block's outputs (detached) or token ids.
  absl::StatusOr<BlockRun> Run(const std::vector<torch::Tensor>& xs, const torch::Tensor& targets,
                               at::Generator& gen) {
    ActionKind pass = ActionKind::kForward;  // the pass running, for errors
    try {
      return RunPasses(xs, targets, gen, pass);
    } catch (const c10::Error& e) {
      return absl::InternalError(Where(pass, e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return absl::InternalError(Where(pass, e.what()));
    }
  }

 private:
  // As a stage runs its first block: the tensors needing grad are views of one leaf (boundary.h).
  absl::StatusOr<BlockRun> RunPasses(const std::vector<torch::Tensor>& xs,
                                     const torch::Tensor& targets, at::Generator& gen,
                                     ActionKind& pass) {
    const bool last = k_ == model_.num_blocks() - 1;
    const int b = static_cast<int>(targets.size(0));
    std::vector<torch::Tensor> args = xs;
    torch::Tensor leaf;
    if (k_ > 0) {
      absl::StatusOr<std::vector<torch::Tensor>> in = InputsFromActivations(
          model_.Boundary(k_, b), xs, xs[0].device(), &leaf, Where(pass, "input"));
      if (!in.ok()) return in.status();
      args = *std::move(in);
    }
    BlockRun run;

    pass = ActionKind::kForward;
    const Clock::time_point f0 = Clock::now();
    absl::StatusOr<std::vector<torch::Tensor>> out = model_.RunBlock(k_, args);
    if (!out.ok()) return Prefixed(pass, out.status());
    std::vector<torch::Tensor> ys = *std::move(out);
    torch::Tensor root;
    if (last) {
      const torch::Tensor& y = ys[0];
      if (y.dim() != 3 || y.size(0) != targets.size(0) || y.size(1) != targets.size(1)) {
        return absl::InvalidArgumentError(Where(
            pass, absl::StrCat("returned ", c10::str(y.sizes()), "; logits must be [b, L, V] = [",
                               targets.size(0), ", ", targets.size(1), ", V]")));
      }
      root =
          torch::nn::functional::cross_entropy(y.reshape({-1, y.size(-1)}), targets.reshape({-1}));
      if (ys.size() == 2) root = root + ys[1].reshape({});
      (void)root.item<float>();  // the stage reports the loss inside F
    }
    const Clock::time_point f1 = Clock::now();
    run.f_ms = Ms(f0, f1);
    for (const torch::Tensor& y : ys) run.output.push_back(y.detach());

    torch::Tensor grad_output;  // the loss: dLoss = 1
    pass = ActionKind::kBackwardInput;
    const Clock::time_point b0 = Clock::now();
    if (!last) {
      const BoundarySpec spec = model_.Boundary(k_ + 1, b);
      const TensorSpec g = spec.GradientWire();
      absl::StatusOr<GradRoot> start = MakeGradRoot(
          spec, ys,
          torch::randn(g.shape, gen, torch::TensorOptions().dtype(g.dtype).device(ys[0].device())),
          Where(pass, "output"));
      if (!start.ok()) return start.status();
      root = start->root;
      grad_output = start->grad;
    }
    absl::StatusOr<std::unique_ptr<SplitBackward>> split =
        SplitBackward::Make(root, leaf, params_);
    if (!split.ok()) return Prefixed(pass, split.status());
    absl::StatusOr<torch::Tensor> grad_input = (*split)->RunInput(grad_output);
    if (!grad_input.ok()) return Prefixed(pass, grad_input.status());
    const Clock::time_point b1 = Clock::now();
    run.b_ms = Ms(b0, b1);

    pass = ActionKind::kBackwardWeight;
    if (absl::Status st = (*split)->RunWeight(); !st.ok()) return Prefixed(pass, st);
    run.w_ms = Ms(b1, Clock::now());
    return run;
  }

  std::string Where(ActionKind pass, absl::string_view what) const {
    return absl::StrCat("profile: block ", k_, " ('", model_.block_name(k_), "') ",
                        core::ActionKindName(pass), ": ", what);
  }
  absl::Status Prefixed(ActionKind pass, const absl::Status& st) const {
    return absl::Status(st.code(), Where(pass, st.message()));
  }

  BlockModel& model_;
  const int k_;
  const std::vector<torch::Tensor> params_;
};

}  // namespace

absl::StatusOr<std::vector<core::BlockCost>> ProfileBlocks(BlockModel& model,
                                                           int microbatch_size, int seq_len,
                                                           int warmup, int reps) {
  if (microbatch_size < 1 || seq_len < 1 || warmup < 0 || reps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: microbatch_size, seq_len and reps must be >= 1 and warmup >= 0 (got ",
        microbatch_size, ", ", seq_len, ", ", reps, ", ", warmup, ")"));
  }
  if (model.vocab() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile: model ", model.path(),
                     " was loaded without a probe (seq_len 0), so V is unknown; load it with the "
                     "job's seq_len"));
  }
  const int n = model.num_blocks();
  TrainingStateGuard restore(model);
  torch::AutoGradMode grad_mode(true);

  std::vector<BlockProfiler> profilers;
  std::vector<core::BlockCost> costs(n);
  for (int k = 0; k < n; ++k) {
    std::vector<torch::Tensor> params;
    for (const auto& [name, p] : model.BlockParameters(k)) {
      torch::Tensor(p).requires_grad_(true);  // as a stage makes them; the guard restores
      params.push_back(p);
      costs[k].param_bytes += Bytes(p);
    }
    profilers.emplace_back(model, k, std::move(params));
  }

  at::Generator gen = at::detail::createCPUGenerator(kSeed);
  struct Samples {
    std::vector<double> f, b, w;
  };
  std::vector<Samples> ms(n);
  for (int rep = 0; rep < warmup + reps; ++rep) {
    torch::Tensor ids, targets;
    try {
      ids = torch::randint(model.vocab(), {microbatch_size, seq_len}, gen, torch::kLong);
      targets = torch::randint(model.vocab(), {microbatch_size, seq_len}, gen, torch::kLong);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("profile: token ids: ", e.what_without_backtrace()));
    }
    std::vector<torch::Tensor> x = {ids};
    for (int k = 0; k < n; ++k) {
      absl::StatusOr<BlockRun> run = profilers[k].Run(x, targets, gen);
      if (!run.ok()) return run.status();
      if (rep >= warmup) {
        ms[k].f.push_back(run->f_ms);
        ms[k].b.push_back(run->b_ms);
        ms[k].w.push_back(run->w_ms);
      }
      costs[k].activation_bytes = 0;
      for (const torch::Tensor& y : run->output) costs[k].activation_bytes += Bytes(y);
      x = std::move(run->output);
    }
  }
  for (int k = 0; k < n; ++k) {
    costs[k].f_ms = Median(ms[k].f);
    costs[k].b_ms = Median(ms[k].b);
    costs[k].w_ms = Median(ms[k].w);
  }
  return costs;
}

}  // namespace zpipe::worker::model
