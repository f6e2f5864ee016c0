#include "worker/model/block_model.h"

#include <exception>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/internal/stage_base.h"
#include "worker/model/internal/torch_status.h"
#include "worker/model/split_backward.h"

namespace zpipe::worker::model {
namespace {

using internal::GuardTorch;

std::string Shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

// "[2, 16]" for one tensor, "([2, 16, 32], [2, 16])" for several.
std::string Describe(const std::vector<torch::Tensor>& xs) {
  if (xs.size() == 1) return Shape(xs[0]);
  std::string out = "(";
  for (size_t i = 0; i < xs.size(); ++i) absl::StrAppend(&out, i ? ", " : "", Shape(xs[i]));
  return out + ")";
}

// Training mode again on every block when the probe returns, whichever way.
class TrainAgain {
 public:
  explicit TrainAgain(BlockModel& model) : model_(model) {}
  ~TrainAgain() {
    for (int k = 0; k < model_.num_blocks(); ++k) model_.SetBlockTraining(k, true);
  }
  TrainAgain(const TrainAgain&) = delete;
  TrainAgain& operator=(const TrainAgain&) = delete;

 private:
  BlockModel& model_;
};

class BlockStage final : public internal::StageBase {
 public:
  BlockStage(std::shared_ptr<BlockModel> model, int begin, int end, const StageOptions& options)
      : StageBase(options), model_(std::move(model)), begin_(begin), end_(end) {
    for (int k = begin_; k < end_; ++k) {
      // This stage's blocks live on its device (a CUDA stage's parameters, gradients and
      // optimizer state on the GPU); the loaded file is on the CPU.
      if (options.device != torch::Device(torch::kCPU)) model_->MoveBlock(k, options.device);
      for (auto& [name, tensor] : model_->BlockParameters(k)) {
        torch::Tensor t = tensor;
        t.requires_grad_(true);
        ParamInfo info;
        info.name = name;
        info.tensor = t;
        info.phase = GradPhase::kW;
        info.accumulations_per_microbatch = 1;
        info.layer = k;
        infos_.push_back(std::move(info));
        tensors_.push_back(t);
      }
    }
  }

  // Probes the split on `probe_input` (the wire of one microbatch of `microbatch_size`): when
  // the graph has none, every parameter becomes B-phase (the whole backward runs in B).
  absl::Status ProbeSplit(const torch::Tensor& probe_input, const torch::Tensor& probe_targets,
                          int microbatch_size) {
    return GuardTorch(stage(), "probe", -1, [&]() -> absl::Status {
      torch::AutoGradMode grad_mode(true);
      MicrobatchState st;
      absl::StatusOr<std::vector<torch::Tensor>> out =
          Run("probe", -1, probe_input, &probe_targets, nullptr, &st);
      if (!out.ok()) return out.status();
      torch::Tensor root = (*out)[0];
      if (!is_last()) {
        const BoundarySpec spec = model_->Boundary(end_, microbatch_size);
        const TensorSpec g = spec.GradientWire();
        absl::StatusOr<GradRoot> r = MakeGradRoot(
            spec, *out, torch::ones(g.shape, torch::TensorOptions().dtype(g.dtype)), "probe");
        if (!r.ok()) return r.status();
        root = r->root;
      }
      auto split = SplitBackward::Make(root, st.input, tensors_);
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
      torch::Tensor loss_value;
      absl::StatusOr<std::vector<torch::Tensor>> out =
          Run("F", mb, input, targets, &loss_value, &st);
      if (!out.ok()) return out.status();
      torch::Tensor result;
      if (is_last()) {
        losses_[mb] = loss_value;
        result = loss_value;
      } else {
        std::vector<torch::Tensor> detached;
        for (const torch::Tensor& y : *out) detached.push_back(y.detach());
        absl::StatusOr<torch::Tensor> wire =
            PackActivations(model_->Boundary(end_, st.batch), detached, Where("F", mb, "output"));
        if (!wire.ok()) return wire.status();
        result = *std::move(wire);
      }
      st.outputs = *std::move(out);
      fwd_.emplace(mb, std::move(st));
      return result;
    });
  }

  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad_output) override {
    auto it = fwd_.find(mb);
    if (it == fwd_.end()) {
      return Precondition("B", mb, "no forward state (B without F, or B twice)");
    }
    GradRoot start;
    if (is_last()) {
      absl::StatusOr<torch::Tensor> resolved = OutputGrad(mb, it->second.outputs[0], grad_output);
      if (!resolved.ok()) return resolved.status();
      start = {it->second.outputs[0], resolved->to(it->second.outputs[0].options(),
                                                   /*non_blocking=*/false, /*copy=*/true)};
    } else {
      absl::StatusOr<GradRoot> resolved =
          GuardTorch(stage(), "B", mb, [&]() -> absl::StatusOr<GradRoot> {
            return MakeGradRoot(model_->Boundary(end_, it->second.batch), it->second.outputs,
                                grad_output, Where("B", mb, "output gradient"));
          });
      if (!resolved.ok()) return resolved.status();
      start = *std::move(resolved);
    }
    MicrobatchState st = std::move(it->second);
    fwd_.erase(it);
    return GuardTorch(stage(), "B", mb, [&]() -> absl::StatusOr<torch::Tensor> {
      auto split = SplitBackward::Make(start.root, st.input, tensors_);
      if (!split.ok()) return split.status();
      if (!fused_ && !(*split)->split()) {
        return absl::InternalError(absl::StrCat(
            "stage ", stage(), " B microbatch ", mb,
            ": the backward could not be split although the probe could; cut elsewhere"));
      }
      absl::StatusOr<torch::Tensor> grad_input = (*split)->RunInput(start.grad);
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
    return model_->Boundary(begin_, microbatch_size).ActivationWire();
  }
  TensorSpec OutputSpec(int microbatch_size) const override {
    return model_->Boundary(end_, microbatch_size).ActivationWire();
  }
  TensorSpec InputGradSpec(int microbatch_size) const override {
    return model_->Boundary(begin_, microbatch_size).GradientWire();
  }
  TensorSpec OutputGradSpec(int microbatch_size) const override {
    return model_->Boundary(end_, microbatch_size).GradientWire();
  }
  void SetTraining(bool training) override {
    training_ = training;
    for (int k = begin_; k < end_; ++k) model_->SetBlockTraining(k, training);
  }

 private:
  struct MicrobatchState {
    int batch = 0;        // the microbatch size (the boundaries' shapes scale with it)
    torch::Tensor input;  // leaf requiring grad (s > 0): the gradient wire's shape
    std::vector<torch::Tensor> outputs;  // the last block's tensors, or the loss (last stage)
  };

  // The microbatch size whose input wire `wire` is (Forward is not told it): a tensor crossing
  // alone has it as its first dimension; a packed tuple grows with it, so the size whose wire is
  // as long is the one.
  absl::StatusOr<int> WireBatch(absl::string_view op, int mb, const torch::Tensor& wire) const {
    if (wire.defined() && wire.dim() >= 1) {
      if (!model_->Boundary(begin_, 1).tuple()) return static_cast<int>(wire.size(0));
      for (int b = 1; b <= wire.numel(); ++b) {
        const int64_t bytes = model_->Boundary(begin_, b).ActivationWire().shape[0];
        if (bytes == wire.numel()) return b;
        if (bytes > wire.numel()) break;
      }
    }
    return Invalid(
        op, mb,
        absl::StrCat("input activation ", wire.defined() ? c10::str(wire.sizes()) : "undefined",
                     " is the wire of no microbatch size for the boundary ",
                     model_->Boundary(begin_, 1).ToString(), " (at batch 1)"));
  }

  // This stage's blocks on `input` (token ids, or the previous stage's wire); the last stage adds
  // the loss (and reports its value). Fills `st`'s batch and input leaf.
  absl::StatusOr<std::vector<torch::Tensor>> Run(absl::string_view op, int mb,
                                                 const torch::Tensor& input,
                                                 const torch::Tensor* targets,
                                                 torch::Tensor* loss_value, MicrobatchState* st) {
    std::vector<torch::Tensor> xs;
    if (is_first()) {
      if (!input.defined() || input.dim() != 2 || input.scalar_type() != torch::kLong) {
        return Invalid(op, mb, "input: want int64 token ids shaped [batch, seq]");
      }
      st->batch = static_cast<int>(input.size(0));
      xs.push_back(input.detach().to(options_.device, torch::kLong, false, /*copy=*/true));
    } else {
      absl::StatusOr<int> batch = WireBatch(op, mb, input);
      if (!batch.ok()) return batch.status();
      st->batch = *batch;
      const BoundarySpec spec = model_->Boundary(begin_, *batch);
      const std::string where = Where(op, mb, "input activation");
      absl::StatusOr<std::vector<torch::Tensor>> parts = UnpackActivations(spec, input, where);
      if (!parts.ok()) return parts.status();
      absl::StatusOr<std::vector<torch::Tensor>> args =
          InputsFromActivations(spec, *parts, options_.device, &st->input, where);
      if (!args.ok()) return args.status();
      xs = *std::move(args);
    }
    for (int k = begin_; k < end_; ++k) {
      absl::StatusOr<std::vector<torch::Tensor>> ys = model_->RunBlock(k, xs);
      if (!ys.ok()) return absl::Status(ys.status().code(), Where(op, mb, ys.status().message()));
      xs = *std::move(ys);
    }
    if (!is_last()) return xs;
    const torch::Tensor& x = xs[0];
    if (x.dim() != 3 || xs.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the last block returned ", Shape(x), xs.size() > 1 ? " and more" : "",
          "; it must return logits [b, L, V], or (logits, aux) with aux a scalar loss"));
    }
    torch::Tensor t = targets->detach().to(options_.device, torch::kLong);
    if (t.dim() != 2 || t.size(0) != x.size(0) || t.size(1) != x.size(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("targets ", Shape(t), " do not match the logits ", Shape(x)));
    }
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(x.reshape({-1, x.size(-1)}), t.reshape({-1}));
    if (xs.size() == 2) loss = loss + xs[1].reshape({}).to(loss.scalar_type());
    if (loss_value != nullptr) *loss_value = loss.detach();
    return std::vector<torch::Tensor>{loss};
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

  std::shared_ptr<BlockModel> model_;
  const int begin_, end_;
  std::vector<ParamInfo> infos_;
  std::vector<torch::Tensor> tensors_;
  bool fused_ = false;
  bool training_ = true;      // SetTraining: eval forwards keep no graph
  std::set<int> fused_open_;  // fused: B done, W not yet
  std::map<int, MicrobatchState> fwd_;
  std::map<int, std::unique_ptr<SplitBackward>> weight_;
};

}  // namespace

std::string BlockLabel(int k, const std::string& name) {
  return absl::StrCat("block ", k, " ('", name, "')");
}

BlockModel::BlockModel(std::string path, std::vector<std::string> names)
    : path_(std::move(path)), names_(std::move(names)) {}

absl::Status BlockModel::BadModel(absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat("model ", path_, ": ", why));
}

int64_t BlockModel::block_numel(int k) const {
  int64_t numel = 0;
  for (const auto& [name, p] : const_cast<BlockModel*>(this)->BlockParameters(k)) {
    numel += p.numel();
  }
  return numel;
}

// Every parameter must be a tensor of its own. Each pipeline stage holds, synchronises and steps
// the parameters of its blocks; stages on other workers (or other chunks of one worker) would
// each train their own copy of a weight that two blocks share (tied embedding and head), and
// within one stage a tensor under two names would be two entries of its parameter list, which the
// gradient buckets and the optimizer take as two parameters. Refused, naming both.
absl::Status BlockModel::CheckNoSharedParameters() {
  std::map<const c10::StorageImpl*, std::pair<int, std::string>> first;  // block, name
  for (int k = 0; k < num_blocks(); ++k) {
    for (const auto& [name, value] : BlockParameters(k)) {
      if (!value.has_storage()) continue;
      auto [it, fresh] =
          first.emplace(value.storage().unsafeGetStorageImpl(), std::make_pair(k, name));
      if (fresh) continue;
      const auto& [j, other] = it->second;
      const std::string what =
          j == k ? absl::StrCat(BlockLabel(k, names_[k]), " holds one tensor under two names: '",
                                other, "' and '", name,
                                "' (tied weights); ZeroPipe takes every parameter name as a "
                                "parameter of its own (gradient buckets, optimizer state)")
                 : absl::StrCat(BlockLabel(j, names_[j]), " and ", BlockLabel(k, names_[k]),
                                " share a parameter: '", other, "' and '", name,
                                "' are the same tensor (tied weights); ZeroPipe trains each "
                                "block's parameters on that block's pipeline stage, so a shared "
                                "weight would be trained as separate copies");
      return BadModel(absl::StrCat(what,
                                   "; untie it (give each its own parameter, e.g. "
                                   "examples/llama's build(tie_embeddings=False))"));
    }
  }
  return absl::OkStatus();
}

// The dry forward: zeros of `batch` token ids through every block. BadModel naming the block
// that fails or cannot take what the previous one returns.
absl::StatusOr<BlockModel::Trace> BlockModel::DryForward(int batch, int seq_len) {
  Trace out;
  out.push_back({torch::zeros({batch, seq_len}, torch::kLong)});
  for (int k = 0; k < num_blocks(); ++k) {
    const std::vector<torch::Tensor>& xs = out.back();
    if (absl::Status st = CheckArity(k, xs.size()); !st.ok()) return BadModel(st.message());
    absl::StatusOr<std::vector<torch::Tensor>> y;
    try {
      y = RunBlock(k, xs);
    } catch (const c10::Error& e) {
      return BadModel(absl::StrCat(BlockLabel(k, names_[k]), " failed on an input ", Describe(xs),
                                   " (", e.what_without_backtrace(), ")"));
    } catch (const std::exception& e) {
      // The TorchScript interpreter rethrows an op's error as std::runtime_error (its message
      // holds the model's traceback), not as a c10::Error.
      return BadModel(absl::StrCat(BlockLabel(k, names_[k]), " failed on an input ", Describe(xs),
                                   " (", e.what(), ")"));
    }
    if (!y.ok()) return BadModel(y.status().message());
    out.push_back(*std::move(y));
  }
  return out;
}

absl::Status BlockModel::Probe(int seq_len, int microbatch_size) {
  seq_len_ = seq_len;
  // The probe runs in eval mode, so that it neither updates running statistics (BatchNorm) nor
  // draws random numbers (dropout); training mode from then on.
  TrainAgain train_again(*this);
  if (seq_len == 0) return absl::OkStatus();
  for (int k = 0; k < num_blocks(); ++k) SetBlockTraining(k, false);
  try {
    // With gradients, as the stages run: whether a tensor is part of the graph shows.
    torch::AutoGradMode grad_mode(true);
    for (int k = 0; k < num_blocks(); ++k) {
      for (auto& [name, p] : BlockParameters(k)) torch::Tensor(p).requires_grad_(true);
    }
    absl::StatusOr<Trace> probe = DryForward(microbatch_size, seq_len);
    if (!probe.ok()) return probe.status();
    // A second batch size tells which tensors of a tuple scale with the batch.
    bool tuples = false;
    for (const auto& xs : *probe) tuples = tuples || xs.size() > 1;
    Trace other;
    if (tuples) {
      absl::StatusOr<Trace> more = DryForward(microbatch_size + 1, seq_len);
      if (!more.ok()) return more.status();
      other = *std::move(more);
    }
    return RecordBoundaries(*probe, other, microbatch_size);
  } catch (const c10::Error& e) {
    return BadModel(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return BadModel(e.what());
  }
}

absl::Status BlockModel::RecordBoundaries(const Trace& probe, const Trace& other,
                                          int microbatch_size) {
  const int n = num_blocks();
  const int seq_len = seq_len_;
  boundaries_.assign(n + 1, {});
  for (int k = 0; k <= n; ++k) {
    const std::vector<torch::Tensor>& ys = probe[k];
    const std::string producer = k == 0 ? "the data" : BlockLabel(k - 1, names_[k - 1]);
    for (size_t i = 0; i < ys.size(); ++i) {
      const torch::Tensor& y = ys[i];
      Probed p;
      p.tensor.spec = TensorSpec{y.sizes().vec(), y.scalar_type()};
      if (ys.size() == 1) {
        // Alone it is the hidden state: batch-major, and (floating) it gets its gradient.
        if (y.dim() < 1 || y.size(0) != microbatch_size) {
          return BadModel(absl::StrCat(producer, " returned ", Shape(y),
                                       "; its first dimension must stay the batch (",
                                       microbatch_size, ")"));
        }
        p.tensor.needs_grad = k > 0 && y.is_floating_point();
      } else {
        const torch::Tensor& y2 = other[k][i];
        if (y2.sizes() == y.sizes()) {
          p.batched = false;
        } else if (y.dim() < 1 || y2.dim() != y.dim() || y.size(0) != microbatch_size ||
                   y2.size(0) != microbatch_size + 1 || y.sizes().slice(1) != y2.sizes().slice(1)) {
          return BadModel(absl::StrCat(producer, " returned tensor ", i, " of its tuple shaped ",
                                       Shape(y), " for a microbatch of ", microbatch_size, " and ",
                                       Shape(y2), " for one of ", microbatch_size + 1,
                                       "; a tensor crossing a cut must have the batch as its first "
                                       "dimension or a shape that does not depend on the batch"));
        }
        p.tensor.needs_grad = y.is_floating_point() && y.requires_grad();
      }
      boundaries_[k].push_back(p);
    }
    if (k > 0 && k < n && Boundary(k, microbatch_size).num_grads() == 0) {
      return BadModel(absl::StrCat(
          "none of the tensors ", producer, " returns ", Boundary(k, microbatch_size).ToString(),
          " needs a gradient (integer, boolean, or not computed from parameters), so the "
          "blocks before it could not train if a cut fell there; pass the hidden state on"));
    }
  }
  const std::vector<torch::Tensor>& last = probe[n];
  const std::string last_block = BlockLabel(n - 1, names_.back());
  if (last.size() > 2 ||
      (last.size() == 2 && (!last[1].is_floating_point() || last[1].numel() != 1))) {
    return BadModel(absl::StrCat("the last block (", last_block, ") returned ", Describe(last),
                                 "; it must return float logits [b, L, V], or (logits, aux) "
                                 "with aux a float scalar (an auxiliary loss added to the "
                                 "cross-entropy)"));
  }
  const torch::Tensor& x = last[0];
  if (x.dim() != 3 || x.size(1) != seq_len || !x.is_floating_point()) {
    return BadModel(absl::StrCat("the last block (", last_block, ") returned ", Shape(x), " ",
                                 c10::toString(x.scalar_type()),
                                 "; it must return float logits [b, L, V] = [", microbatch_size,
                                 ", ", seq_len, ", V]"));
  }
  vocab_ = static_cast<int>(x.size(2));
  return absl::OkStatus();
}

BoundarySpec BlockModel::Boundary(int k, int microbatch_size) const {
  BoundarySpec spec;
  for (const Probed& p : boundaries_[k]) {
    BoundaryTensor t = p.tensor;
    if (p.batched) t.spec.shape[0] = microbatch_size;
    spec.tensors.push_back(std::move(t));
  }
  return spec;
}

absl::StatusOr<std::vector<int>> StageBoundaries(const std::vector<int>& cuts, int num_blocks,
                                                 int num_stages, absl::string_view field) {
  if (num_stages < 1) return absl::InvalidArgumentError("stages must be >= 1");
  if (num_blocks < num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": the model has ", num_blocks, " blocks, fewer than the ", num_stages,
                     " pipeline stages (p x chunks); use fewer stages or more blocks"));
  }
  std::vector<int> out;
  out.push_back(0);
  if (cuts.empty()) {
    const int base = num_blocks / num_stages, extra = num_blocks % num_stages;
    for (int s = 1; s < num_stages; ++s) out.push_back(s * base + std::min(s, extra));
  } else {
    if (static_cast<int>(cuts.size()) != num_stages - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".cuts: needs ", num_stages - 1, " entries, got ", cuts.size()));
    }
    for (int c : cuts) {
      if (c <= out.back() || c >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".cuts: ", c, " is not a block index in (", out.back(), ", ", num_blocks,
            "); cuts must be strictly increasing and leave every stage a block"));
      }
      out.push_back(c);
    }
  }
  out.push_back(num_blocks);
  return out;
}

absl::StatusOr<std::unique_ptr<Stage>> MakeBlockStage(std::shared_ptr<BlockModel> model, int begin,
                                                      int end, const StageOptions& options) {
  if (model == nullptr || begin < 0 || end <= begin || end > model->num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("block stage ", options.stage, ": bad block range [", begin, ", ", end, ")"));
  }
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError("num_microbatches must be >= 1");
  }
  auto stage = std::make_unique<BlockStage>(model, begin, end, options);
  // The probe: the stage's own blocks on zeros of its input boundary (targets zeros).
  const TensorSpec in = model->Boundary(begin, 1).ActivationWire();
  torch::Tensor input = torch::zeros(in.shape, torch::TensorOptions().dtype(in.dtype));
  torch::Tensor targets = torch::zeros({1, model->seq_len()}, torch::kLong);
  if (absl::Status st = stage->ProbeSplit(input, targets, 1); !st.ok()) return st;
  return std::unique_ptr<Stage>(std::move(stage));
}

bool FusedBackward(const Stage& stage) {
  const auto* ts = dynamic_cast<const BlockStage*>(&stage);
  return ts != nullptr && ts->fused();
}

int64_t BlockModelVocab(const std::vector<std::unique_ptr<Stage>>& stages) {
  for (const auto& s : stages) {
    if (const auto* ts = dynamic_cast<const BlockStage*>(s.get())) return ts->vocab();
  }
  return 0;
}

}  // namespace zpipe::worker::model
