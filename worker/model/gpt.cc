#include "worker/model/gpt.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/model/internal/stage_base.h"
#include "worker/model/internal/torch_status.h"
#include "worker/model/weight_grad_store.h"

namespace zpipe::worker::model {
namespace {

using internal::GuardTorch;
using internal::SeededParam;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Linear {
  torch::Tensor weight;   // [out, in]
  torch::Tensor bias;     // [out] or undefined
  int weight_param = -1;  // indices into the stage's params()
  int bias_param = -1;
};

struct Block {
  torch::Tensor ln1_w, ln1_b;
  Linear qkv, proj;
  torch::Tensor ln2_w, ln2_b;
  Linear fc1, fc2;
};

// The parameters of a contiguous slice of the model. Linear objects live at stable addresses
// (blocks are reserved up front) because the split-linear backward refers to them by pointer.
struct Parts {
  spec::LayerRange range;
  bool has_embedding = false;
  bool has_head = false;
  torch::Tensor tok_emb, pos_emb;
  std::vector<Block> blocks;
  torch::Tensor lnf_w, lnf_b;
  Linear head;
  std::vector<ParamInfo> infos;
};

class PartsBuilder {
 public:
  PartsBuilder(uint64_t seed, torch::Device device, torch::Dtype dtype, Parts* parts)
      : seed_(seed), device_(device), dtype_(dtype), parts_(parts) {}

  torch::Tensor Add(const std::string& name, at::IntArrayRef shape, double std, double fill,
                    GradPhase phase, int layer) {
    torch::Tensor t = SeededParam(seed_, name, shape, std, fill, device_, dtype_);
    parts_->infos.push_back(ParamInfo{name, t, phase, 1, layer});
    return t;
  }
  torch::Tensor Normal(const std::string& name, at::IntArrayRef shape, double std, GradPhase phase,
                       int layer) {
    return Add(name, shape, std, 0, phase, layer);
  }
  torch::Tensor Fill(const std::string& name, at::IntArrayRef shape, double value, GradPhase phase,
                     int layer) {
    return Add(name, shape, 0, value, phase, layer);
  }
  Linear MakeLinear(const std::string& name, int64_t in, int64_t out, double std, bool bias,
                    int layer) {
    Linear l;
    l.weight_param = static_cast<int>(parts_->infos.size());
    l.weight = Normal(name + ".weight", {out, in}, std, GradPhase::kW, layer);
    if (bias) {
      l.bias_param = static_cast<int>(parts_->infos.size());
      l.bias = Fill(name + ".bias", {out}, 0.0, GradPhase::kW, layer);
    }
    return l;
  }

 private:
  uint64_t seed_;
  torch::Device device_;
  torch::Dtype dtype_;
  Parts* parts_;
};

// GPT-2 style init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L), zero biases,
// unit LayerNorm gains.
void BuildParts(const GptConfig& c, spec::LayerRange range, bool has_embedding, bool has_head,
                uint64_t seed, torch::Device device, torch::Dtype dtype, Parts* parts) {
  torch::NoGradGuard no_grad;
  PartsBuilder b(seed, device, dtype, parts);
  const int64_t h = c.hidden;
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * c.layers);
  parts->range = range;
  parts->has_embedding = has_embedding;
  parts->has_head = has_head;
  if (has_embedding) {
    parts->tok_emb = b.Normal("embed.token.weight", {c.vocab, h}, std, GradPhase::kB, -1);
    parts->pos_emb = b.Normal("embed.position.weight", {c.seq_len, h}, 0.01, GradPhase::kB, -1);
  }
  parts->blocks.reserve(range.size());
  for (int l = range.begin; l < range.end; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    Block blk;
    blk.ln1_w = b.Fill(p + "ln1.weight", {h}, 1.0, GradPhase::kB, l);
    blk.ln1_b = b.Fill(p + "ln1.bias", {h}, 0.0, GradPhase::kB, l);
    blk.qkv = b.MakeLinear(p + "attn.qkv", h, 3 * h, std, true, l);
    blk.proj = b.MakeLinear(p + "attn.proj", h, h, resid_std, true, l);
    blk.ln2_w = b.Fill(p + "ln2.weight", {h}, 1.0, GradPhase::kB, l);
    blk.ln2_b = b.Fill(p + "ln2.bias", {h}, 0.0, GradPhase::kB, l);
    blk.fc1 = b.MakeLinear(p + "mlp.fc1", h, 4 * h, std, true, l);
    blk.fc2 = b.MakeLinear(p + "mlp.fc2", 4 * h, h, resid_std, true, l);
    parts->blocks.push_back(std::move(blk));
  }
  if (has_head) {
    parts->lnf_w = b.Fill("final_ln.weight", {h}, 1.0, GradPhase::kB, c.layers);
    parts->lnf_b = b.Fill("final_ln.bias", {h}, 0.0, GradPhase::kB, c.layers);
    parts->head = b.MakeLinear("head", h, c.vocab, std, false, c.layers);
  }
}

// In W: accumulate `g` into `param`'s gradient in place (so .grad may alias a bucket buffer).
void AccumulateGrad(const torch::Tensor& param, const torch::Tensor& g) {
  torch::Tensor& grad = const_cast<torch::Tensor&>(param).mutable_grad();
  if (grad.defined()) {
    grad.add_(g);
  } else {
    // In the parameter's dtype: under bf16 autocast `g` is bf16, the master weight fp32.
    grad = g.to(param.scalar_type()).contiguous();
  }
}

// y = x W^T + b whose backward returns only dL/dx and queues the weight and bias gradients in
// the stage's WeightGradStore under the microbatch given at forward time.
class SplitLinearFn : public torch::autograd::Function<SplitLinearFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const Linear* layer,
                               WeightGradStore* store, int64_t mb) {
    ctx->save_for_backward({x});
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["store"] = reinterpret_cast<int64_t>(store);
    ctx->saved_data["mb"] = mb;
    return torch::linear(x, weight, layer->bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* layer = reinterpret_cast<const Linear*>(ctx->saved_data["layer"].toInt());
    auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["store"].toInt());
    const int mb = static_cast<int>(ctx->saved_data["mb"].toInt());
    torch::Tensor x = ctx->get_saved_variables()[0];
    torch::Tensor grad_out = grad_outputs[0];
    // Under autocast the product ran in the output's dtype (bf16): B and W compute in it too
    // (autograd casts grad_x back to x's dtype).
    const torch::ScalarType compute = grad_out.scalar_type();
    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      grad_x = torch::matmul(grad_out, layer->weight.detach().to(compute));
    }
    std::vector<int> landed{layer->weight_param};
    if (layer->bias.defined()) landed.push_back(layer->bias_param);
    absl::Status pushed = store->Push(
        mb,
        [x = x.detach(), g = grad_out.detach(), w = layer->weight, b = layer->bias, compute] {
          torch::NoGradGuard no_grad;
          const torch::Tensor x2 = x.reshape({-1, x.size(-1)}).to(compute);
          const torch::Tensor g2 = g.reshape({-1, g.size(-1)});
          AccumulateGrad(w, g2.t().mm(x2));
          if (b.defined()) AccumulateGrad(b, g2.sum(0));
        },
        std::move(landed));
    TORCH_CHECK(pushed.ok(), std::string(pushed.message()));
    return {grad_x, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct PlainLinear {
  torch::Tensor operator()(const torch::Tensor& x, const Linear& l) const {
    return torch::linear(x, l.weight, l.bias);
  }
};

struct SplitLinear {
  WeightGradStore* store;
  int64_t mb;
  torch::Tensor operator()(const torch::Tensor& x, const Linear& l) const {
    return SplitLinearFn::apply(x, l.weight, &l, store, mb);
  }
};

template <typename LinearOp>
torch::Tensor BlockForward(const Block& b, torch::Tensor x, int heads, const LinearOp& linear) {
  const int64_t bsz = x.size(0), t = x.size(1), h = x.size(2), hd = h / heads;
  torch::Tensor a = torch::layer_norm(x, {h}, b.ln1_w, b.ln1_b, 1e-5);
  std::vector<torch::Tensor> qkv = linear(a, b.qkv).split(h, -1);
  auto heads_view = [&](const torch::Tensor& z) {
    return z.reshape({bsz, t, heads, hd}).transpose(1, 2);  // [b, heads, T, hd]
  };
  torch::Tensor q = heads_view(qkv[0]), k = heads_view(qkv[1]), v = heads_view(qkv[2]);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  torch::Tensor causal =
      torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  att = torch::softmax(att.masked_fill(causal, -std::numeric_limits<double>::infinity()), -1);
  torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({bsz, t, h});
  x = x + linear(y, b.proj);
  torch::Tensor m = torch::layer_norm(x, {h}, b.ln2_w, b.ln2_b, 1e-5);
  return x + linear(torch::gelu(linear(m, b.fc1)), b.fc2);
}

torch::Tensor Embed(const Parts& p, const torch::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  return torch::embedding(p.tok_emb, tokens) + p.pos_emb.narrow(0, 0, t);
}

template <typename LinearOp>
torch::Tensor Blocks(const Parts& p, torch::Tensor x, int heads, const LinearOp& linear) {
  for (const Block& b : p.blocks) x = BlockForward(b, std::move(x), heads, linear);
  return x;
}

template <typename LinearOp>
torch::Tensor HeadLoss(const Parts& p, const torch::Tensor& x, const torch::Tensor& targets,
                       const LinearOp& linear) {
  torch::Tensor y = torch::layer_norm(x, {x.size(-1)}, p.lnf_w, p.lnf_b, 1e-5);
  torch::Tensor logits = linear(y, p.head);
  return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// A copy the stage owns, so callers may reuse their buffers once a call returns (autograd keeps
// inputs, token ids and targets until B).
torch::Tensor OwnedCopy(const torch::Tensor& t, torch::Device device) {
  return t.detach().to(device, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
}
torch::Tensor OwnedCopy(const torch::Tensor& t, torch::Device device, torch::Dtype dtype) {
  return t.detach().to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

absl::Status CheckTokens(const GptConfig& c, const torch::Tensor& t, absl::string_view what) {
  if (!t.defined() || t.dim() != 2 || t.scalar_type() != torch::kLong) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": want int64 token ids shaped [batch, seq]"));
  }
  if (t.size(1) < 1 || t.size(1) > c.seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": sequence length ", t.size(1), " not in 1..", c.seq_len));
  }
  return absl::OkStatus();
}

class GptStage final : public internal::StageBase {
 public:
  GptStage(const GptConfig& config, const StageOptions& options)
      : StageBase(options), config_(config) {
    BuildParts(config, spec::StageLayers(config.layers, options.num_stages, options.stage),
               options.stage == 0, options.stage == options.num_stages - 1, options.seed,
               options.device, options.dtype, &parts_);
  }

  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor* targets) override {
    return GuardTorch(stage(), "F", mb, [&]() -> absl::StatusOr<torch::Tensor> {
      if (fwd_.count(mb)) {
        return Precondition("F", mb, "forward state already held (F twice without B)");
      }
      if (is_last() && (targets == nullptr || !targets->defined())) {
        return Invalid("F", mb, "the last stage needs targets");
      }
      torch::AutoGradMode grad_mode(true);
      const SplitLinear linear{&store_, mb};
      MicrobatchState st;
      torch::Tensor x;
      if (is_first()) {
        if (absl::Status s = CheckTokens(config_, input, Where("F", mb, "input")); !s.ok())
          return s;
        x = Embed(parts_, OwnedCopy(input, options_.device));
      } else {
        if (!input.defined() || input.dim() != 3 || input.size(2) != config_.hidden ||
            input.size(1) > config_.seq_len) {
          return Invalid("F", mb,
                         absl::StrCat("input activation must be [batch, seq<=", config_.seq_len,
                                      ", ", config_.hidden, "]"));
        }
        st.input = OwnedCopy(input, options_.device, options_.dtype).requires_grad_(true);
        x = st.input;
      }
      x = Blocks(parts_, std::move(x), config_.heads, linear);
      if (!is_last()) {
        st.output = x;
        fwd_.emplace(mb, std::move(st));
        return x.detach();
      }
      if (absl::Status s = CheckTokens(config_, *targets, Where("F", mb, "targets")); !s.ok()) {
        return s;
      }
      if (targets->size(0) != x.size(0) || targets->size(1) != x.size(1)) {
        return Invalid("F", mb, "targets shape differs from the activation's [batch, seq]");
      }
      torch::Tensor loss = HeadLoss(parts_, x, OwnedCopy(*targets, options_.device), linear);
      losses_[mb] = loss.detach();
      st.output = loss;
      fwd_.emplace(mb, std::move(st));
      return loss.detach();
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
    if (absl::Status s = store_.Open(mb); !s.ok()) return s;
    absl::StatusOr<torch::Tensor> result =
        GuardTorch(stage(), "B", mb, [&]() -> absl::StatusOr<torch::Tensor> {
          // A private copy: W closures may keep the output gradient until W(i), and the caller
          // may reuse its buffer as soon as B returns.
          torch::autograd::backward({root}, {grad.to(root.options(), false, /*copy=*/true)},
                                    /*retain_graph=*/false);
          if (is_first()) return torch::Tensor();
          return it->second.input.grad().detach();
        });
    fwd_.erase(it);  // B is done with the graph either way
    if (!result.ok()) {
      store_.Drop(mb);
    } else {
      NotifyBPhaseGrads();
    }
    return result;
  }

  void FreeMicrobatch(int mb) override {
    fwd_.erase(mb);
    DropQueued(mb);
  }
  int pending_microbatches() const override {
    return static_cast<int>(fwd_.size()) + store_.pending_microbatches();
  }

  const std::vector<ParamInfo>& params() const override { return parts_.infos; }

  TensorSpec InputSpec(int microbatch_size) const override {
    if (is_first()) return TensorSpec{{microbatch_size, config_.seq_len}, torch::kLong};
    return OutputSpec(microbatch_size);
  }
  TensorSpec OutputSpec(int microbatch_size) const override {
    return TensorSpec{{microbatch_size, config_.seq_len, config_.hidden}, options_.dtype};
  }

 private:
  struct MicrobatchState {
    torch::Tensor input;   // leaf requiring grad (s > 0); its .grad is B's result
    torch::Tensor output;  // graph root: activation, or the loss on the last stage
  };

  std::string Where(absl::string_view op, int mb, absl::string_view what) const {
    return absl::StrCat("stage ", stage(), " ", op, " microbatch ", mb, " ", what);
  }
  absl::Status Precondition(absl::string_view op, int mb, absl::string_view why) const {
    return absl::FailedPreconditionError(Where(op, mb, why));
  }
  absl::Status Invalid(absl::string_view op, int mb, absl::string_view why) const {
    return absl::InvalidArgumentError(Where(op, mb, why));
  }

  const GptConfig config_;
  Parts parts_;
  // Declared after parts_ (and the base's store_): the graphs held here point at both
  // (SplitLinearFn saves their addresses), so they must be destroyed first.
  std::map<int, MicrobatchState> fwd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Stage>> MakeGptStage(const GptConfig& config,
                                                    const StageOptions& options) {
  if (absl::Status s = spec::ValidateGptConfig(config, options.num_stages); !s.ok()) return s;
  if (options.stage < 0 || options.stage >= options.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", options.stage, " not in 0..", options.num_stages - 1));
  }
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_microbatches ", options.num_microbatches, " must be >= 1"));
  }
  return GuardTorch(options.stage, "init", -1, [&]() -> absl::StatusOr<std::unique_ptr<Stage>> {
    return std::unique_ptr<Stage>(std::make_unique<GptStage>(config, options));
  });
}

struct GptReference::Impl {
  GptConfig config;
  torch::Device device = torch::kCPU;
  Parts parts;
};

GptReference::GptReference(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptReference::~GptReference() = default;

absl::StatusOr<std::unique_ptr<GptReference>> GptReference::Make(const GptConfig& config,
                                                                 uint64_t seed,
                                                                 torch::Device device,
                                                                 torch::Dtype dtype) {
  if (absl::Status s = spec::ValidateGptConfig(config, 1); !s.ok()) return s;
  return GuardTorch(0, "init", -1, [&]() -> absl::StatusOr<std::unique_ptr<GptReference>> {
    auto impl = std::make_unique<Impl>();
    impl->config = config;
    impl->device = device;
    BuildParts(config, spec::LayerRange{0, config.layers}, true, true, seed, device, dtype,
               &impl->parts);
    return std::unique_ptr<GptReference>(new GptReference(std::move(impl)));
  });
}

absl::StatusOr<torch::Tensor> GptReference::Loss(const torch::Tensor& tokens,
                                                 const torch::Tensor& targets) {
  if (absl::Status s = CheckTokens(impl_->config, tokens, "reference tokens"); !s.ok()) return s;
  if (absl::Status s = CheckTokens(impl_->config, targets, "reference targets"); !s.ok()) return s;
  if (tokens.sizes() != targets.sizes()) {
    return absl::InvalidArgumentError("reference: tokens and targets differ in shape");
  }
  return GuardTorch(0, "reference F", -1, [&]() -> absl::StatusOr<torch::Tensor> {
    const PlainLinear linear;
    torch::Tensor x = Embed(impl_->parts, tokens.to(impl_->device));
    x = Blocks(impl_->parts, std::move(x), impl_->config.heads, linear);
    return HeadLoss(impl_->parts, x, targets.to(impl_->device), linear);
  });
}

const std::vector<ParamInfo>& GptReference::params() const { return impl_->parts.infos; }

std::vector<torch::Tensor> GptReference::parameters() const {
  std::vector<torch::Tensor> out;
  for (const ParamInfo& p : impl_->parts.infos) out.push_back(p.tensor);
  return out;
}

}  // namespace zpipe::worker::model
