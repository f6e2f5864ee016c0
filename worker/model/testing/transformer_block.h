// Models for SplitBackward's tests and benchmark: a pre-LN transformer block written with plain
// torch ops (causal self-attention with one qkv projection chunked in three, GELU MLP, residual
// adds), as torch::nn modules and as TorchScript source defined in C++. Parameters are
// registered in forward order, so parameters() is the order SplitBackward expects.
#ifndef ZPIPE_WORKER_MODEL_TESTING_TRANSFORMER_BLOCK_H_
#define ZPIPE_WORKER_MODEL_TESTING_TRANSFORMER_BLOCK_H_

#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model::testing {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t hidden, int64_t heads)
      : heads_(heads),
        qkv_(register_module("qkv", torch::nn::Linear(hidden, 3 * hidden))),
        proj_(register_module("proj", torch::nn::Linear(hidden, hidden))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), h = x.size(2), d = h / heads_;
    const std::vector<torch::Tensor> qkv = qkv_(x).chunk(3, -1);
    const auto split_heads = [&](const torch::Tensor& z) {
      return z.view({b, t, heads_, d}).transpose(1, 2);
    };
    const torch::Tensor scores = split_heads(qkv[0]).matmul(split_heads(qkv[1]).transpose(-2, -1)) /
                                 std::sqrt(static_cast<double>(d));
    const torch::Tensor mask = torch::ones({t, t}, torch::kBool).triu(1);
    const torch::Tensor att = torch::softmax(scores.masked_fill(mask, -1e9), -1);
    return proj_(att.matmul(split_heads(qkv[2])).transpose(1, 2).contiguous().view({b, t, h}));
  }

 private:
  int64_t heads_;
  torch::nn::Linear qkv_;
  torch::nn::Linear proj_;
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t hidden, int64_t inner)
      : fc1_(register_module("fc1", torch::nn::Linear(hidden, inner))),
        fc2_(register_module("fc2", torch::nn::Linear(inner, hidden))) {}

  torch::Tensor forward(const torch::Tensor& x) { return fc2_(torch::gelu(fc1_(x))); }

 private:
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};
TORCH_MODULE(Mlp);

// x + attn(ln1(x)), then h + mlp(ln2(h)) with a 4x MLP.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t hidden, int64_t heads)
      : ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        attn_(register_module("attn", CausalSelfAttention(hidden, heads))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        mlp_(register_module("mlp", Mlp(hidden, 4 * hidden))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = x + attn_(ln1_(x));
    return h + mlp_(ln2_(h));
  }

 private:
  torch::nn::LayerNorm ln1_;
  CausalSelfAttention attn_;
  torch::nn::LayerNorm ln2_;
  Mlp mlp_;
};
TORCH_MODULE(TransformerBlock);

// The same block as a TorchScript module defined from source (weights [in, out]), with random
// parameters of `dtype`. Run it under torch::jit::setGraphExecutorOptimize(false) for a per-op
// autograd graph.
inline torch::jit::Module ScriptedTransformerBlock(int64_t hidden, int64_t heads,
                                                   torch::Dtype dtype) {
  torch::jit::Module m("ScriptedTransformerBlock");
  const auto param = [&](const char* name, std::vector<int64_t> shape, double scale, double shift) {
    torch::Tensor p = torch::randn(shape, torch::TensorOptions().dtype(dtype)) * scale + shift;
    m.register_parameter(name, p.requires_grad_(true), /*is_buffer=*/false);
  };
  const double std = 1.0 / std::sqrt(static_cast<double>(hidden));
  param("ln1_w", {hidden}, 0.1, 1.0);
  param("ln1_b", {hidden}, 0.1, 0.0);
  param("qkv_w", {hidden, 3 * hidden}, std, 0.0);
  param("qkv_b", {3 * hidden}, 0.1, 0.0);
  param("proj_w", {hidden, hidden}, std, 0.0);
  param("proj_b", {hidden}, 0.1, 0.0);
  param("ln2_w", {hidden}, 0.1, 1.0);
  param("ln2_b", {hidden}, 0.1, 0.0);
  param("fc1_w", {hidden, 4 * hidden}, std, 0.0);
  param("fc1_b", {4 * hidden}, 0.1, 0.0);
  param("fc2_w", {4 * hidden, hidden}, std / 2, 0.0);
  param("fc2_b", {hidden}, 0.1, 0.0);
  const int64_t d = hidden / heads;
  m.define(absl::StrCat(R"JIT(
def forward(self, x):
    b = x.size(0)
    t = x.size(1)
    c = x.size(2)
    h = torch.layer_norm(x, [c], self.ln1_w, self.ln1_b, 1e-5)
    q, k, v = (torch.matmul(h, self.qkv_w) + self.qkv_b).chunk(3, -1)
    q = q.view([b, t, )JIT",
                        heads, ", ", d, R"JIT(]).transpose(1, 2)
    k = k.view([b, t, )JIT",
                        heads, ", ", d, R"JIT(]).transpose(1, 2)
    v = v.view([b, t, )JIT",
                        heads, ", ", d, R"JIT(]).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * )JIT",
                        1.0 / std::sqrt(static_cast<double>(d)), R"JIT(
    mask = torch.ones_like(scores).triu(1) > 0.5
    att = torch.softmax(scores.masked_fill(mask, -1e9), -1)
    y = torch.matmul(att, v).transpose(1, 2).contiguous().view([b, t, c])
    x = x + torch.matmul(y, self.proj_w) + self.proj_b
    h = torch.layer_norm(x, [c], self.ln2_w, self.ln2_b, 1e-5)
    h = torch.gelu(torch.matmul(h, self.fc1_w) + self.fc1_b)
    return x + torch.matmul(h, self.fc2_w) + self.fc2_b
)JIT"));
  return m;
}

inline std::vector<torch::Tensor> ParametersOf(const torch::jit::Module& m) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : m.parameters()) out.push_back(p);
  return out;
}

}  // namespace zpipe::worker::model::testing

#endif  // ZPIPE_WORKER_MODEL_TESTING_TRANSFORMER_BLOCK_H_
