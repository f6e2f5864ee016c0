#include "worker/model/torchscript.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include <exception>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/internal/stage_base.h"
#include "worker/model/internal/torch_status.h"
#include "worker/model/split_backward.h"
#include "worker/model/torchscript_archive.h"

namespace zpipe::worker::model {
namespace {

using internal::GuardTorch;

std::string Shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

absl::Status BadModel(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("model ", path, ": ", why));
}

// "block 3 ('3')".
std::string BlockLabel(int k, const std::string& name) {
  return absl::StrCat("block ", k, " ('", name, "')");
}

// torch.jit.load failed. A file whose format version is above what this LibTorch reads was
// saved by a newer torch: LibTorch's own message then says to upgrade PyTorch, which is not what
// the user of a worker can do, so the error says which versions meet and what to do instead.
absl::Status UnreadableModel(const std::string& path, absl::string_view what) {
  absl::StatusOr<int64_t> version = TorchScriptFileFormatVersion(path);
  if (version.ok() && *version > MaxReadableFileFormatVersion()) {
    return BadModel(
        path, absl::StrCat("written by a newer torch than this worker's (file format version ",
                           *version, "; this worker's LibTorch is ", LibTorchVersion(),
                           " and reads versions up to ", MaxReadableFileFormatVersion(),
                           "): script and save the model with torch ", LibTorchVersion(),
                           " (the project's venv, scripts/find-python) or older, or run workers "
                           "built with a LibTorch as new as the torch that saved it"));
  }
  return BadModel(path,
                  absl::StrCat("not a TorchScript file torch.jit.load can read (", what, ")"));
}

// Every parameter must be a tensor of its own. Each pipeline stage holds, synchronises and steps
// the parameters of its blocks; stages on other workers (or other chunks of one worker) would
// each train their own copy of a weight that two blocks share (tied embedding and head), and
// within one stage a tensor under two names would be two entries of its parameter list, which the
// gradient buckets and the optimizer take as two parameters. Refused, naming both.
absl::Status CheckNoSharedParameters(const std::string& path,
                                     const std::vector<torch::jit::Module>& blocks,
                                     const std::vector<std::string>& names) {
  std::map<const c10::StorageImpl*, std::pair<int, std::string>> first;  // block, name
  for (int k = 0; k < static_cast<int>(blocks.size()); ++k) {
    for (const auto& p : blocks[k].named_parameters(/*recurse=*/true)) {
      if (!p.value.has_storage()) continue;
      const std::string name = absl::StrCat(names[k], ".", p.name);
      auto [it, fresh] = first.emplace(p.value.storage().unsafeGetStorageImpl(),
                                       std::make_pair(k, name));
      if (fresh) continue;
      const auto& [j, other] = it->second;
      const std::string what =
          j == k ? absl::StrCat(BlockLabel(k, names[k]), " holds one tensor under two names: '",
                                other, "' and '", name,
                                "' (tied weights); ZeroPipe takes every parameter name as a "
                                "parameter of its own (gradient buckets, optimizer state)")
                 : absl::StrCat(BlockLabel(j, names[j]), " and ", BlockLabel(k, names[k]),
                                " share a parameter: '", other, "' and '", name,
                                "' are the same tensor (tied weights); ZeroPipe trains each "
                                "block's parameters on that block's pipeline stage, so a shared "
                                "weight would be trained as separate copies");
      return BadModel(path, absl::StrCat(what,
                                         "; untie it (give each its own parameter, e.g. "
                                         "examples/llama's build(tie_embeddings=False))"));
    }
  }
  return absl::OkStatus();
}

// Runs block k on `x`; InvalidArgument naming the block when it does not return one tensor.
absl::StatusOr<torch::Tensor> RunBlock(torch::jit::Module& block, int k, const std::string& name,
                                       const torch::Tensor& x) {
  torch::jit::IValue out = block.forward({x});
  if (!out.isTensor()) {
    return absl::InvalidArgumentError(absl::StrCat(BlockLabel(k, name), " returned a ",
                                                   out.tagKind(),
                                                   "; every block must return one tensor"));
  }
  return out.toTensor();
}

class TorchScriptStage final : public internal::StageBase {
 public:
  TorchScriptStage(std::shared_ptr<TorchScriptModel> model, int begin, int end,
                   const StageOptions& options)
      : StageBase(options), model_(std::move(model)), begin_(begin), end_(end) {
    for (int k = begin_; k < end_; ++k) {
      // This stage's blocks live on its device (a CUDA stage's parameters, gradients and
      // optimizer state on the GPU); the loaded file is on the CPU.
      if (options.device != torch::Device(torch::kCPU)) model_->block(k).to(options.device);
      for (const auto& p : model_->block(k).named_parameters(/*recurse=*/true)) {
        torch::Tensor t = p.value;
        t.requires_grad_(true);
        ParamInfo info;
        info.name = absl::StrCat(model_->block_name(k), ".", p.name);
        info.tensor = t;
        info.phase = GradPhase::kW;
        info.accumulations_per_microbatch = 1;
        info.layer = k;
        infos_.push_back(std::move(info));
        tensors_.push_back(t);
      }
    }
  }

  // Probes the split on one microbatch of `probe` input: when the graph has none, every
  // parameter becomes B-phase (the whole backward runs in B).
  absl::Status ProbeSplit(const torch::Tensor& probe_input, const torch::Tensor& probe_targets) {
    return GuardTorch(stage(), "probe", -1, [&]() -> absl::Status {
      torch::AutoGradMode grad_mode(true);
      absl::StatusOr<torch::Tensor> out = Run(probe_input, &probe_targets, nullptr);
      if (!out.ok()) return out.status();
      torch::Tensor input = is_first() ? torch::Tensor() : probe_input;
      auto split = SplitBackward::Make(*out, input, tensors_);
      if (!split.ok()) return split.status();
      fused_ = !(*split)->split();
      if (fused_) {
        for (ParamInfo& p : infos_) p.phase = GradPhase::kB;
      }
      return absl::OkStatus();
    });
  }

  bool fused() const { return fused_; }
  int64_t vocab() const { return model_->vocab(); }

  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor* targets) override {
    return GuardTorch(stage(), "F", mb, [&]() -> absl::StatusOr<torch::Tensor> {
      if (fwd_.count(mb) || weight_.count(mb)) {
        return Precondition("F", mb, "state already held (F twice without B and W)");
      }
      if (is_last() && (targets == nullptr || !targets->defined())) {
        return Invalid("F", mb, "the last stage needs targets");
      }
      torch::AutoGradMode grad_mode(training_);
      MicrobatchState st;
      torch::Tensor x;
      if (is_first()) {
        if (!input.defined() || input.dim() != 2 || input.scalar_type() != torch::kLong) {
          return Invalid("F", mb, "input: want int64 token ids shaped [batch, seq]");
        }
        x = input.detach().to(options_.device, torch::kLong, false, /*copy=*/true);
      } else {
        const TensorSpec want = model_->BoundarySpec(begin_, input.defined() ? input.size(0) : 1);
        if (!input.defined() || input.sizes().vec() != want.shape) {
          return Invalid("F", mb,
                         absl::StrCat("input activation must be ", c10::str(want.shape), ", got ",
                                      input.defined() ? Shape(input) : "undefined"));
        }
        st.input = input.detach()
                       .to(options_.device, want.dtype, false, /*copy=*/true)
                       .requires_grad_(true);
        x = st.input;
      }
      torch::Tensor loss_value;
      absl::StatusOr<torch::Tensor> out = Run(x, targets, &loss_value);
      if (!out.ok()) return out.status();
      st.output = *out;
      if (is_last()) losses_[mb] = loss_value;
      torch::Tensor result = out->detach();
      fwd_.emplace(mb, std::move(st));
      return result;
    });
  }

  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad_output) override {
    auto it = fwd_.find(mb);
    if (it == fwd_.end()) {
      return Precondition("B", mb, "no forward state (B without F, or B twice)");
    }
    torch::Tensor root = it->second.output;
    absl::StatusOr<torch::Tensor> resolved = OutputGrad(mb, root, grad_output);
    if (!resolved.ok()) return resolved.status();
    const torch::Tensor grad = *std::move(resolved);
    MicrobatchState st = std::move(it->second);
    fwd_.erase(it);
    return GuardTorch(stage(), "B", mb, [&]() -> absl::StatusOr<torch::Tensor> {
      torch::Tensor input = is_first() ? torch::Tensor() : st.input;
      auto split = SplitBackward::Make(st.output, input, tensors_);
      if (!split.ok()) return split.status();
      if (!fused_ && !(*split)->split()) {
        return absl::InternalError(absl::StrCat(
            "stage ", stage(), " B microbatch ", mb,
            ": the backward could not be split although the probe could; cut elsewhere"));
      }
      absl::StatusOr<torch::Tensor> grad_input =
          (*split)->RunInput(grad.to(root.options(), false, /*copy=*/true));
      if (!grad_input.ok()) return grad_input.status();
      if (fused_) {
        NotifyBPhaseGrads();
        fused_open_.insert(mb);
      } else {
        weight_.emplace(mb, *std::move(split));
      }
      if (is_first() || !grad_input->defined()) return torch::Tensor();
      return grad_input->detach();
    });
  }

  absl::Status BackwardWeight(int mb) override {
    if (fused_) {  // B did everything; W only closes the microbatch
      if (fused_open_.erase(mb) == 0) {
        return Precondition("W", mb, "B has not run (W without B, or W twice)");
      }
      return absl::OkStatus();
    }
    auto it = weight_.find(mb);
    if (it == weight_.end()) {
      return Precondition("W", mb, "no queued weight work (W without B, or W twice)");
    }
    std::unique_ptr<SplitBackward> split = std::move(it->second);
    weight_.erase(it);
    return GuardTorch(stage(), "W", mb, [&]() -> absl::Status {
      return split->RunWeight([this](int param) { NotifyGradLanded(param); });
    });
  }

  void FreeMicrobatch(int mb) override {
    fwd_.erase(mb);
    weight_.erase(mb);
    fused_open_.erase(mb);
    DropQueued(mb);
  }
  int pending_microbatches() const override {
    return static_cast<int>(fwd_.size() + weight_.size() + fused_open_.size());
  }
  const std::vector<ParamInfo>& params() const override { return infos_; }
  TensorSpec InputSpec(int microbatch_size) const override {
    return model_->BoundarySpec(begin_, microbatch_size);
  }
  TensorSpec OutputSpec(int microbatch_size) const override {
    return model_->BoundarySpec(end_, microbatch_size);
  }
  void SetTraining(bool training) override {
    training_ = training;
    for (int k = begin_; k < end_; ++k) model_->block(k).train(training);
  }

 private:
  struct MicrobatchState {
    torch::Tensor input;   // leaf requiring grad (s > 0)
    torch::Tensor output;  // graph root: activation, or the loss on the last stage
  };

  // This stage's blocks on `x`; the last stage adds the loss (and reports its value).
  absl::StatusOr<torch::Tensor> Run(torch::Tensor x, const torch::Tensor* targets,
                                    torch::Tensor* loss_value) {
    for (int k = begin_; k < end_; ++k) {
      absl::StatusOr<torch::Tensor> y = RunBlock(model_->block(k), k, model_->block_name(k), x);
      if (!y.ok()) return y.status();
      x = *std::move(y);
    }
    if (!is_last()) return x;
    if (x.dim() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("the last block returned ", Shape(x), "; logits must be [b, L, V]"));
    }
    torch::Tensor t = targets->detach().to(options_.device, torch::kLong);
    if (t.dim() != 2 || t.size(0) != x.size(0) || t.size(1) != x.size(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("targets ", Shape(t), " do not match the logits ", Shape(x)));
    }
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(x.reshape({-1, x.size(-1)}), t.reshape({-1}));
    if (loss_value != nullptr) *loss_value = loss.detach();
    return loss;
  }

  std::string Where(absl::string_view op, int mb, absl::string_view what) const {
    return absl::StrCat("stage ", stage(), " ", op, " microbatch ", mb, ": ", what);
  }
  absl::Status Precondition(absl::string_view op, int mb, absl::string_view why) const {
    return absl::FailedPreconditionError(Where(op, mb, why));
  }
  absl::Status Invalid(absl::string_view op, int mb, absl::string_view why) const {
    return absl::InvalidArgumentError(Where(op, mb, why));
  }

  std::shared_ptr<TorchScriptModel> model_;
  const int begin_, end_;
  std::vector<ParamInfo> infos_;
  std::vector<torch::Tensor> tensors_;
  bool fused_ = false;
  bool training_ = true;  // SetTraining: eval forwards keep no graph
  std::set<int> fused_open_;  // fused: B done, W not yet
  std::map<int, MicrobatchState> fwd_;
  std::map<int, std::unique_ptr<SplitBackward>> weight_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<TorchScriptModel>> TorchScriptModel::Load(const std::string& path,
                                                                         int seq_len,
                                                                         int microbatch_size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model ", path, ": no such file"));
  }
  if (seq_len < 0 || microbatch_size < 1) {
    return absl::InvalidArgumentError("model: seq_len must be >= 0, microbatch_size >= 1");
  }
  torch::jit::setGraphExecutorOptimize(false);
  auto m = std::shared_ptr<TorchScriptModel>(new TorchScriptModel());
  m->path_ = path;
  m->seq_len_ = seq_len;
  try {
    m->module_ = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    return UnreadableModel(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return UnreadableModel(path, e.what());
  }
  for (const auto& child : m->module_.named_children()) {
    m->names_.push_back(child.name);
    m->blocks_.push_back(child.value);
    int64_t numel = 0;
    for (const auto& p : child.value.named_parameters(true)) numel += p.value.numel();
    m->numel_.push_back(numel);
  }
  if (m->blocks_.empty()) {
    return BadModel(path,
                    "has no blocks; save a torch.nn.Sequential whose children are the blocks");
  }
  if (absl::Status st = CheckNoSharedParameters(path, m->blocks_, m->names_); !st.ok()) return st;
  for (int k = 0; k < m->num_blocks(); ++k) {
    auto method = m->blocks_[k].find_method("forward");
    if (!method)
      return BadModel(path, absl::StrCat(BlockLabel(k, m->names_[k]), " has no forward"));
    const c10::FunctionSchema& schema = method->function().getSchema();
    if (schema.arguments().size() != 2 || schema.returns().size() != 1) {
      return BadModel(path, absl::StrCat(BlockLabel(k, m->names_[k]), ": forward",
                                         schema.arguments().size() > 0 ? "" : "",
                                         " must take one tensor and return one tensor (its schema "
                                         "is ",
                                         c10::str(schema), ")"));
    }
  }
  // Training mode from here on; the shape probe below runs in eval mode so that it neither
  // updates running statistics (BatchNorm) nor draws random numbers (dropout).
  m->module_.train();
  if (seq_len == 0) return m;
  // The probe: zeros of one microbatch through every block, recording each boundary.
  m->module_.eval();
  struct TrainAgain {
    torch::jit::Module& module;
    ~TrainAgain() { module.train(); }
  } train_again{m->module_};
  try {
    torch::NoGradGuard no_grad;
    torch::Tensor x = torch::zeros({microbatch_size, seq_len}, torch::kLong);
    m->boundaries_.resize(m->num_blocks() + 1);
    m->boundaries_[0] = TensorSpec{x.sizes().vec(), torch::kLong};
    for (int k = 0; k < m->num_blocks(); ++k) {
      absl::StatusOr<torch::Tensor> y;
      try {
        y = RunBlock(m->blocks_[k], k, m->names_[k], x);
      } catch (const c10::Error& e) {
        return BadModel(path, absl::StrCat(BlockLabel(k, m->names_[k]), " failed on an input ",
                                           Shape(x), " (", e.what_without_backtrace(), ")"));
      } catch (const std::exception& e) {
        // The TorchScript interpreter rethrows an op's error as std::runtime_error (its message
        // holds the model's traceback), not as a c10::Error.
        return BadModel(path, absl::StrCat(BlockLabel(k, m->names_[k]), " failed on an input ",
                                           Shape(x), " (", e.what(), ")"));
      }
      if (!y.ok()) return BadModel(path, y.status().message());
      if (y->dim() < 1 || y->size(0) != microbatch_size) {
        return BadModel(path, absl::StrCat(BlockLabel(k, m->names_[k]), " returned ", Shape(*y),
                                           "; its first dimension must stay the batch (",
                                           microbatch_size, ")"));
      }
      x = *y;
      m->boundaries_[k + 1] = TensorSpec{x.sizes().vec(), x.scalar_type()};
    }
    if (x.dim() != 3 || x.size(1) != seq_len || !x.is_floating_point()) {
      return BadModel(
          path, absl::StrCat("the last block (", BlockLabel(m->num_blocks() - 1, m->names_.back()),
                             ") returned ", Shape(x), " ", c10::toString(x.scalar_type()),
                             "; it must return float logits [b, L, V] = [", microbatch_size, ", ",
                             seq_len, ", V]"));
    }
    m->vocab_ = static_cast<int>(x.size(2));
  } catch (const c10::Error& e) {
    return BadModel(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return BadModel(path, e.what());
  }
  return m;
}

TensorSpec TorchScriptModel::BoundarySpec(int k, int microbatch_size) const {
  TensorSpec spec = boundaries_[k];
  if (!spec.shape.empty()) spec.shape[0] = microbatch_size;
  return spec;
}

absl::StatusOr<std::vector<int>> StageBoundaries(const std::vector<int>& cuts, int num_blocks,
                                                 int num_stages) {
  if (num_stages < 1) return absl::InvalidArgumentError("stages must be >= 1");
  if (num_blocks < num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript: the model has ", num_blocks, " blocks, fewer than the ",
                     num_stages, " pipeline stages (p x chunks); use fewer stages or more blocks"));
  }
  std::vector<int> out;
  out.push_back(0);
  if (cuts.empty()) {
    const int base = num_blocks / num_stages, extra = num_blocks % num_stages;
    for (int s = 1; s < num_stages; ++s) out.push_back(s * base + std::min(s, extra));
  } else {
    if (static_cast<int>(cuts.size()) != num_stages - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.torchscript.cuts: needs ", num_stages - 1, " entries, got ", cuts.size()));
    }
    for (int c : cuts) {
      if (c <= out.back() || c >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model.torchscript.cuts: ", c, " is not a block index in (", out.back(), ", ",
            num_blocks, "); cuts must be strictly increasing and leave every stage a block"));
      }
      out.push_back(c);
    }
  }
  out.push_back(num_blocks);
  return out;
}

absl::StatusOr<std::unique_ptr<Stage>> MakeTorchScriptStage(std::shared_ptr<TorchScriptModel> model,
                                                            int begin, int end,
                                                            const StageOptions& options) {
  if (model == nullptr || begin < 0 || end <= begin || end > model->num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("torchscript stage ", options.stage,
                                                   ": bad block range [", begin, ", ", end, ")"));
  }
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError("num_microbatches must be >= 1");
  }
  auto stage = std::make_unique<TorchScriptStage>(model, begin, end, options);
  // The probe: the stage's own blocks on zeros of its input boundary (targets zeros).
  const TensorSpec in = model->BoundarySpec(begin, 1);
  torch::Tensor input = torch::zeros(in.shape, torch::TensorOptions().dtype(in.dtype));
  if (begin > 0) input.requires_grad_(true);
  torch::Tensor targets = torch::zeros({1, model->seq_len()}, torch::kLong);
  if (absl::Status st = stage->ProbeSplit(input, targets); !st.ok()) return st;
  return std::unique_ptr<Stage>(std::move(stage));
}

bool FusedBackward(const Stage& stage) {
  const auto* ts = dynamic_cast<const TorchScriptStage*>(&stage);
  return ts != nullptr && ts->fused();
}

int64_t TorchScriptVocab(const std::vector<std::unique_ptr<Stage>>& stages) {
  for (const auto& s : stages) {
    if (const auto* ts = dynamic_cast<const TorchScriptStage*>(s.get())) return ts->vocab();
  }
  return 0;
}

absl::Status ExportTorchScript(TorchScriptModel& model,
                               const std::vector<std::pair<std::string, torch::Tensor>>& values,
                               const std::string& out) {
  std::map<std::string, torch::Tensor> by_name(values.begin(), values.end());
  try {
    torch::NoGradGuard no_grad;
    for (const auto& p : model.module().named_parameters(/*recurse=*/true)) {
      auto it = by_name.find(p.name);
      if (it == by_name.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("export: no trained value for parameter '", p.name, "'"));
      }
      if (it->second.sizes() != p.value.sizes()) {
        return absl::InvalidArgumentError(absl::StrCat("export: parameter '", p.name, "' is ",
                                                       Shape(p.value), " in the model, ",
                                                       Shape(it->second), " trained"));
      }
      p.value.copy_(it->second);
    }
    model.module().save(out);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("export to ", out, ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker::model
