// SplitBackward: B then W gives the input and parameter gradients of a plain backward() (to 1e-6
// of the largest reference entry, in float64) for the layer kinds a user stage is made of, torch
// modules and TorchScript alike; B alone leaves .grad alone; W lands every parameter exactly
// once, later layers first, in place into existing .grad storage; graphs that cannot be split
// fall back to B doing everything, with the same gradients.
#include "worker/model/split_backward.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/model/testing/transformer_block.h"

namespace zpipe::worker::model {
namespace {

constexpr double kRelTol = 1e-6;
const torch::TensorOptions kF64 = torch::TensorOptions().dtype(torch::kFloat64);

using Forward = std::function<torch::Tensor(const torch::Tensor& input)>;

// max |actual - expected| <= kRelTol * max |expected|; both undefined is equal.
void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.defined(), expected.defined()) << what;
  if (!expected.defined()) return;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double scale = expected.abs().max().item<double>();
  const double error = (actual - expected).abs().max().item<double>();
  EXPECT_LE(error, kRelTol * scale) << what << ": max error " << error << ", max |ref| " << scale;
}

void ClearGrads(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> GradsOf(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : params) {
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  }
  return out;
}

// A fresh leaf for a float input (as a stage receives it), the tensor itself for tokens.
torch::Tensor StageInput(const torch::Tensor& input) {
  if (!input.is_floating_point()) return input;
  return input.detach().clone().requires_grad_(true);
}

struct Gradients {
  torch::Tensor input;
  std::vector<torch::Tensor> params;
};

// Plain backward() of the same forward; params' .grad are cleared before and after.
Gradients Reference(const Forward& forward, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params, const torch::Tensor& grad_output) {
  ClearGrads(params);
  torch::Tensor x = StageInput(input);
  torch::Tensor y = forward(x);
  y.backward(grad_output.defined() ? grad_output : torch::ones_like(y));
  // An input the output does not depend on gets no .grad from backward(): its gradient is zero.
  torch::Tensor grad_input;
  if (x.requires_grad()) grad_input = x.grad().defined() ? x.grad().clone() : torch::zeros_like(x);
  Gradients g{grad_input, GradsOf(params)};
  ClearGrads(params);
  return g;
}

struct SplitResult {
  Gradients grads;
  bool split = false;
  std::string fallback_reason;
  int weight_passes = 0;
  std::vector<int> b_landed;
  std::vector<int> w_landed;
};

// F, Make, B, W with the split; checks that B (when split) leaves every .grad undefined.
SplitResult RunSplit(const Forward& forward, const torch::Tensor& input,
                     const std::vector<torch::Tensor>& params, const torch::Tensor& grad_output) {
  ClearGrads(params);
  SplitResult r;
  torch::Tensor x = StageInput(input);
  torch::Tensor y = forward(x);
  absl::StatusOr<std::unique_ptr<SplitBackward>> sb = SplitBackward::Make(y, x, params);
  EXPECT_TRUE(sb.ok()) << sb.status();
  if (!sb.ok()) return r;
  r.split = (*sb)->split();
  r.fallback_reason = (*sb)->fallback_reason();
  r.weight_passes = (*sb)->num_weight_passes();
  absl::StatusOr<torch::Tensor> grad_input =
      (*sb)->RunInput(grad_output, [&](int k) { r.b_landed.push_back(k); });
  EXPECT_TRUE(grad_input.ok()) << grad_input.status();
  if (!grad_input.ok()) return r;
  if (r.split) {
    for (size_t k = 0; k < params.size(); ++k) {
      EXPECT_FALSE(params[k].grad().defined()) << "B touched the .grad of parameter " << k;
    }
  }
  absl::Status w = (*sb)->RunWeight([&](int k) { r.w_landed.push_back(k); });
  EXPECT_TRUE(w.ok()) << w;
  r.grads = {*grad_input, GradsOf(params)};
  ClearGrads(params);
  return r;
}

// Each of 0..n-1 exactly once.
void ExpectEachOnce(std::vector<int> landed, size_t n, const std::string& what) {
  std::sort(landed.begin(), landed.end());
  std::vector<int> want(n);
  for (size_t k = 0; k < n; ++k) want[k] = static_cast<int>(k);
  EXPECT_EQ(landed, want) << what;
}

// The split's gradients equal backward()'s; every parameter lands once, in W when split.
// `grad_output`: random when undefined and the output is not a scalar.
SplitResult ExpectMatchesBackward(const Forward& forward, const torch::Tensor& input,
                                  const std::vector<torch::Tensor>& params,
                                  torch::Tensor grad_output = {}, bool expect_split = true) {
  if (!grad_output.defined()) {
    torch::NoGradGuard no_grad;
    torch::Tensor shape_probe = forward(StageInput(input));
    if (shape_probe.dim() > 0) grad_output = torch::randn(shape_probe.sizes(), kF64);
  }
  const Gradients want = Reference(forward, input, params, grad_output);
  SplitResult got = RunSplit(forward, input, params, grad_output);
  EXPECT_EQ(got.split, expect_split) << got.fallback_reason;
  ExpectClose(got.grads.input, want.input, "input gradient");
  for (size_t k = 0; k < params.size(); ++k) {
    ExpectClose(got.grads.params[k], want.params[k], absl::StrCat("gradient of parameter ", k));
  }
  ExpectEachOnce(got.split ? got.w_landed : got.b_landed, params.size(), "landed");
  EXPECT_TRUE((got.split ? got.b_landed : got.w_landed).empty());
  return got;
}

template <typename Module>
std::vector<torch::Tensor> ParamsOf(Module m) {
  m->to(torch::kFloat64);
  return m->parameters();
}

std::vector<torch::Tensor> Concat(std::vector<std::vector<torch::Tensor>> lists) {
  std::vector<torch::Tensor> out;
  for (auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

using testing::CausalSelfAttention;
using testing::Mlp;
using testing::TransformerBlock;

torch::Tensor Activation(int64_t b, int64_t t, int64_t h) { return torch::randn({b, t, h}, kF64); }

TEST(SplitBackwardTest, Linear) {
  torch::manual_seed(1);
  torch::nn::Linear lin(8, 6);
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor& x) { return lin(x); },
                                              Activation(2, 5, 8), ParamsOf(lin));
  EXPECT_EQ(r.weight_passes, 2);  // on 3-d input: matmul then add, one group each
}

TEST(SplitBackwardTest, LinearOn2dInput) {
  torch::manual_seed(2);
  torch::nn::Linear lin(8, 6);
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor& x) { return lin(x); },
                                              torch::randn({7, 8}, kF64), ParamsOf(lin));
  EXPECT_EQ(r.weight_passes, 1);  // weight and bias share their addmm: one group
}

TEST(SplitBackwardTest, LayerNorm) {
  torch::manual_seed(3);
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({8}));
  ExpectMatchesBackward([&](const torch::Tensor& x) { return ln(x) * 3.0; }, Activation(2, 5, 8),
                        ParamsOf(ln));
}

TEST(SplitBackwardTest, CausalAttentionWithChunkedQkv) {
  torch::manual_seed(4);
  CausalSelfAttention attn(16, 4);
  ExpectMatchesBackward([&](const torch::Tensor& x) { return attn(x); }, Activation(2, 6, 16),
                        ParamsOf(attn));
}

TEST(SplitBackwardTest, GeluMlpLandsLaterLayerFirst) {
  torch::manual_seed(5);
  Mlp mlp(8, 32);
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor& x) { return mlp(x); },
                                              Activation(2, 5, 8), ParamsOf(mlp));
  ASSERT_EQ(r.w_landed.size(), 4u);
  // fc2 (params 2, 3) before fc1 (0, 1): gradient sync can launch fc2's bucket during W.
  EXPECT_GE(std::min(r.w_landed[0], r.w_landed[1]), 2);
  EXPECT_LE(std::max(r.w_landed[2], r.w_landed[3]), 1);
  EXPECT_EQ(r.weight_passes, 4);
}

TEST(SplitBackwardTest, TransformerBlockWithResiduals) {
  torch::manual_seed(6);
  TransformerBlock block(16, 4);
  const std::vector<torch::Tensor> params = ParamsOf(block);
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor& x) { return block(x); },
                                              Activation(2, 6, 16), params);
  EXPECT_EQ(r.weight_passes, 10);  // one per layer norm, two per linear (matmul, bias add)
}

TEST(SplitBackwardTest, FirstStageWithTokenInput) {
  torch::manual_seed(7);
  torch::nn::Embedding tokens(32, 8);
  torch::nn::Embedding positions(6, 8);
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({8}));
  torch::nn::Linear lin(8, 8);
  const std::vector<torch::Tensor> params =
      Concat({ParamsOf(tokens), ParamsOf(positions), ParamsOf(ln), ParamsOf(lin)});
  const Forward forward = [&](const torch::Tensor& ids) {
    torch::Tensor h = tokens(ids) + positions(torch::arange(ids.size(1)));
    return lin(ln(h));
  };
  const SplitResult r =
      ExpectMatchesBackward(forward, torch::randint(0, 32, {3, 6}, torch::kInt64), params);
  EXPECT_FALSE(r.grads.input.defined());
  EXPECT_EQ(r.weight_passes, 1);
}

TEST(SplitBackwardTest, ParameterUsedInTwoConsecutiveLayers) {
  torch::manual_seed(8);
  torch::Tensor w = (torch::randn({8, 8}, kF64) * 0.3).requires_grad_(true);
  torch::Tensor b = torch::randn({8}, kF64).requires_grad_(true);
  // x @ w feeds a second product with w: one intermediate of w reaches the other through the
  // closure; the split must not feed it twice.
  const Forward forward = [&](const torch::Tensor& x) {
    torch::Tensor h = torch::tanh(x.matmul(w));
    return h.matmul(w) + b + x.matmul(w.t());
  };
  const SplitResult r = ExpectMatchesBackward(forward, Activation(2, 5, 8), {w, b});
  EXPECT_EQ(r.weight_passes, 2);  // w's three products form one group, b's add the other
}

TEST(SplitBackwardTest, TiedEmbeddingAndHeadOnFirstStage) {
  torch::manual_seed(9);
  torch::nn::Embedding emb(16, 8);
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({8}));
  const std::vector<torch::Tensor> params = Concat({ParamsOf(emb), ParamsOf(ln)});
  ExpectMatchesBackward(
      [&](const torch::Tensor& ids) { return ln(emb(ids)).matmul(emb->weight.t()); },
      torch::randint(0, 16, {2, 5}, torch::kInt64), params);
}

TEST(SplitBackwardTest, UnusedParameterLandsOnceAndKeepsNoGrad) {
  torch::manual_seed(10);
  torch::nn::Linear lin(8, 8);
  torch::Tensor unused = torch::randn({4}, kF64).requires_grad_(true);
  const std::vector<torch::Tensor> params = Concat({{unused}, ParamsOf(lin)});
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor& x) { return lin(x); },
                                              Activation(2, 3, 8), params);
  EXPECT_FALSE(r.grads.params[0].defined());
  ASSERT_FALSE(r.w_landed.empty());
  EXPECT_EQ(r.w_landed[0], 0);  // nothing to wait for: lands first
}

TEST(SplitBackwardTest, MultiOutputIntermediateRecordsEverySlot) {
  torch::manual_seed(11);
  torch::Tensor a =
      (torch::randn({4, 4}, kF64).triu() + 3 * torch::eye(4, kF64)).requires_grad_(true);
  // triangular_solve's node has two outputs, both used: B must record both slots for W.
  const Forward forward = [&](const torch::Tensor& x) {
    auto [solution, coefficient] = torch::triangular_solve(x, a, /*upper=*/true);
    return solution * coefficient.sum();
  };
  ExpectMatchesBackward(forward, torch::randn({2, 4, 3}, kF64), {a});
}

TEST(SplitBackwardTest, LastStageCrossEntropyLoss) {
  torch::manual_seed(12);
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({8}));
  torch::nn::Linear head(8, 20);
  const std::vector<torch::Tensor> params = Concat({ParamsOf(ln), ParamsOf(head)});
  const torch::Tensor targets = torch::randint(0, 20, {2 * 5}, torch::kInt64);
  const Forward loss = [&](const torch::Tensor& x) {
    return torch::nn::functional::cross_entropy(head(ln(x)).view({-1, 20}), targets);
  };
  ExpectMatchesBackward(loss, Activation(2, 5, 8), params);  // undefined grad: dLoss = 1
  ExpectMatchesBackward(loss, Activation(2, 5, 8), params, torch::tensor(0.25, kF64));
}

TEST(SplitBackwardTest, OutputIndependentOfInputGivesZeroInputGradient) {
  torch::manual_seed(13);
  torch::Tensor w = torch::randn({3, 3}, kF64).requires_grad_(true);
  const SplitResult r = ExpectMatchesBackward([&](const torch::Tensor&) { return w.tanh() * 2; },
                                              Activation(1, 2, 3), {w});
  ASSERT_TRUE(r.grads.input.defined());
  EXPECT_EQ(r.grads.input.abs().sum().item<double>(), 0.0);
}

TEST(SplitBackwardTest, TorchScriptModuleDefinedInCpp) {
  torch::manual_seed(14);
  torch::jit::GraphOptimizerEnabledGuard per_op_graph(false);
  torch::jit::Module m = testing::ScriptedTransformerBlock(16, 4, torch::kFloat64);
  const Forward forward = [&](const torch::Tensor& x) { return m.forward({x}).toTensor(); };
  const std::vector<torch::Tensor> params = testing::ParametersOf(m);
  ASSERT_EQ(params.size(), 12u);
  for (int run = 0; run < 3; ++run) {  // past the executor's first (profiling) runs too
    SCOPED_TRACE(run);
    const SplitResult r = ExpectMatchesBackward(forward, Activation(2, 6, 16), params);
    EXPECT_EQ(r.weight_passes, 10);  // one per layer norm, two per linear (product, bias add)
  }
}

TEST(SplitBackwardTest, OptimizedTorchScriptFallsBack) {
  torch::manual_seed(15);
  torch::jit::GraphOptimizerEnabledGuard optimized(true);
  torch::jit::Module m = testing::ScriptedTransformerBlock(16, 4, torch::kFloat64);
  const Forward forward = [&](const torch::Tensor& x) { return m.forward({x}).toTensor(); };
  for (int warmup = 0; warmup < 2; ++warmup) {  // the executor's profiling runs
    forward(StageInput(Activation(2, 6, 16))).sum().backward();
  }
  // The optimised executor wraps the block in differentiable graphs, which cannot be re-rooted.
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    const SplitResult r =
        ExpectMatchesBackward(forward, Activation(2, 6, 16), testing::ParametersOf(m), {},
                              /*expect_split=*/false);
    EXPECT_NE(r.fallback_reason.find("DifferentiableGraphBackward"), std::string::npos)
        << r.fallback_reason;
  }
  ClearGrads(testing::ParametersOf(m));
}

// A custom autograd function: re-running it is not trusted, so the split falls back.
struct ScaleByParam : public torch::autograd::Function<ScaleByParam> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor w) {
    ctx->save_for_backward({x, w});
    return x * w;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    return {grad[0] * saved[1], (grad[0] * saved[0]).sum_to_size(saved[1].sizes())};
  }
};

TEST(SplitBackwardTest, CustomFunctionIntermediateFallsBack) {
  torch::manual_seed(16);
  torch::nn::Linear lin(8, 8);
  torch::Tensor w = torch::randn({8}, kF64).requires_grad_(true);
  const std::vector<torch::Tensor> params = Concat({ParamsOf(lin), {w}});
  const SplitResult r =
      ExpectMatchesBackward([&](const torch::Tensor& x) { return ScaleByParam::apply(lin(x), w); },
                            Activation(2, 3, 8), params, {}, /*expect_split=*/false);
  EXPECT_NE(r.fallback_reason.find("custom autograd function"), std::string::npos)
      << r.fallback_reason;
  EXPECT_EQ(r.weight_passes, 0);
}

TEST(SplitBackwardTest, HookedIntermediateFallsBackAndTheHookFiresOnce) {
  torch::manual_seed(17);
  torch::nn::Linear lin(8, 8);
  int fired = 0;
  const Forward forward = [&](const torch::Tensor& x) {
    torch::Tensor h = lin(x);  // 2-d: h's grad_fn is the addmm, the weights' intermediate
    h.register_hook([&](const torch::Tensor&) { ++fired; });
    return h.tanh();
  };
  const SplitResult r = ExpectMatchesBackward(forward, torch::randn({4, 8}, kF64), ParamsOf(lin),
                                              torch::randn({4, 8}, kF64), /*expect_split=*/false);
  EXPECT_NE(r.fallback_reason.find("hooks"), std::string::npos) << r.fallback_reason;
  EXPECT_EQ(fired, 2);  // once in the reference backward, once in the split's
}

// LibTorch 2.x keeps retain_grad's hook apart from the node's pre-hooks (retains_grad_hooks());
// W would fire it again and double h.grad.
TEST(SplitBackwardTest, RetainGradOnIntermediateFallsBack) {
  torch::manual_seed(18);
  torch::nn::Linear lin(8, 8);
  torch::Tensor h;
  const Forward forward = [&](const torch::Tensor& x) {
    h = lin(x);
    h.retain_grad();
    return h.tanh();
  };
  const torch::Tensor x = torch::randn({4, 8}, kF64);
  const torch::Tensor g = torch::randn({4, 8}, kF64);
  const SplitResult r = ExpectMatchesBackward(forward, x, ParamsOf(lin), g, /*expect_split=*/false);
  EXPECT_NE(r.fallback_reason.find("hooks"), std::string::npos) << r.fallback_reason;
  ASSERT_TRUE(h.grad().defined());
  EXPECT_TRUE(torch::allclose(h.grad(), g * (1 - h.detach().tanh().pow(2))));
}

TEST(SplitBackwardTest, AccumulatesIntoGradViewsOfOneBuffer) {
  torch::manual_seed(18);
  TransformerBlock block(16, 4);
  const std::vector<torch::Tensor> params = ParamsOf(block);
  const torch::Tensor input = Activation(2, 6, 16);
  const torch::Tensor grad_output = torch::randn({2, 6, 16}, kF64);
  const Gradients want =
      Reference([&](const torch::Tensor& x) { return block(x); }, input, params, grad_output);

  int64_t total = 0;
  for (const torch::Tensor& p : params) total += p.numel();
  const torch::Tensor buffer = torch::randn({total + 5}, kF64);  // 5 trailing guard values
  std::vector<const void*> storage;
  int64_t offset = 0;
  for (const torch::Tensor& p : params) {
    p.mutable_grad() = buffer.narrow(0, offset, p.numel()).view(p.sizes());
    storage.push_back(p.grad().data_ptr());
    offset += p.numel();
  }
  const torch::Tensor before = buffer.clone();

  torch::Tensor x = StageInput(input);
  std::unique_ptr<SplitBackward> sb = *SplitBackward::Make(block(x), x, params);
  ASSERT_TRUE(sb->split());
  ASSERT_TRUE(sb->RunInput(grad_output).ok());
  EXPECT_TRUE(torch::equal(buffer, before)) << "B wrote into .grad";
  std::vector<int> landed;
  ASSERT_TRUE(sb->RunWeight([&](int k) { landed.push_back(k); }).ok());
  ExpectEachOnce(landed, params.size(), "landed");

  offset = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    EXPECT_EQ(params[k].grad().data_ptr(), storage[k]) << "parameter " << k << "'s .grad moved";
    ExpectClose(
        buffer.narrow(0, offset, params[k].numel()) - before.narrow(0, offset, params[k].numel()),
        want.params[k].reshape(-1), absl::StrCat("accumulated gradient of ", k));
    offset += params[k].numel();
  }
  EXPECT_TRUE(torch::equal(buffer.narrow(0, total, 5), before.narrow(0, total, 5)));
  ClearGrads(params);
}

TEST(SplitBackwardTest, InterleavedMicrobatchesAccumulate) {
  torch::manual_seed(19);
  TransformerBlock block(16, 4);
  const std::vector<torch::Tensor> params = ParamsOf(block);
  const Forward forward = [&](const torch::Tensor& x) { return block(x); };
  const std::vector<torch::Tensor> inputs = {Activation(2, 6, 16), Activation(2, 6, 16)};
  const std::vector<torch::Tensor> grads = {torch::randn({2, 6, 16}, kF64),
                                            torch::randn({2, 6, 16}, kF64)};
  std::vector<Gradients> want;
  for (int i = 0; i < 2; ++i) want.push_back(Reference(forward, inputs[i], params, grads[i]));

  // F0 F1 B0 B1 W1 W0: the two graphs share the parameters' AccumulateGrad nodes.
  std::vector<std::unique_ptr<SplitBackward>> sb;
  for (int i = 0; i < 2; ++i) {
    torch::Tensor x = StageInput(inputs[i]);
    sb.push_back(*SplitBackward::Make(forward(x), x, params));
  }
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<torch::Tensor> gx = sb[i]->RunInput(grads[i]);
    ASSERT_TRUE(gx.ok()) << gx.status();
    ExpectClose(*gx, want[i].input, absl::StrCat("input gradient of microbatch ", i));
  }
  ASSERT_TRUE(sb[1]->RunWeight().ok());
  ASSERT_TRUE(sb[0]->RunWeight().ok());
  for (size_t k = 0; k < params.size(); ++k) {
    ExpectClose(params[k].grad(), want[0].params[k] + want[1].params[k],
                absl::StrCat("gradient of parameter ", k));
  }
  ClearGrads(params);
}

TEST(SplitBackwardTest, ErrorsNameTheProblem) {
  torch::manual_seed(20);
  torch::nn::Linear lin(4, 4);
  const std::vector<torch::Tensor> params = ParamsOf(lin);
  torch::Tensor x = StageInput(Activation(1, 2, 4));

  EXPECT_EQ(SplitBackward::Make(x.detach(), x, params).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitBackward::Make(lin(x), x, {params[0] * 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitBackward::Make(lin(x), x, {params[0], params[0]}).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::unique_ptr<SplitBackward> sb = *SplitBackward::Make(lin(x), x, params);
  EXPECT_EQ(sb->RunWeight().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sb->RunInput(torch::ones({3}, kF64)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sb->RunInput(torch::Tensor()).status().code(), absl::StatusCode::kInvalidArgument);
  std::unique_ptr<SplitBackward> ok = *SplitBackward::Make(lin(x), x, params);
  ASSERT_TRUE(ok->RunInput(torch::ones({1, 2, 4}, kF64)).ok());
  EXPECT_EQ(ok->RunInput(torch::ones({1, 2, 4}, kF64)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ok->RunWeight().ok());
  EXPECT_EQ(ok->RunWeight().code(), absl::StatusCode::kFailedPrecondition);
  ClearGrads(params);
}

}  // namespace
}  // namespace zpipe::worker::model
