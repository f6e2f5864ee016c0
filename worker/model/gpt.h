// GPT-style decoder, cut into pipeline stages by layers, with the B/W-split backward.
//
// Model: token + position embedding, L blocks of (LayerNorm -> causal self-attention -> residual,
// LayerNorm -> MLP(GELU) -> residual), final LayerNorm, LM head (no bias), mean cross-entropy.
// Stage 0 holds the embeddings, stage S-1 the final LayerNorm, head and loss; layers are split as
// evenly as possible (spec::StageLayers; L need not be a multiple of S). Every parameter is
// initialised from a generator seeded by (job seed, its global name), and global names contain
// the global layer index, so a stage's parameters equal the corresponding ones of the
// unpartitioned GptReference bit for bit, for any S and placement.
//
// Every Linear (attention qkv/proj, MLP fc1/fc2, head) is a "split linear": its backward during B
// computes only the input gradient and queues a closure (capturing the layer input and output
// gradient) that computes and accumulates weight and bias gradients in W. LayerNorm parameters
// and embeddings get their gradients from autograd during B.
#ifndef ZPIPE_WORKER_MODEL_GPT_H_
#define ZPIPE_WORKER_MODEL_GPT_H_

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spec/gpt_config.h"
#include "worker/model/stage.h"

namespace zpipe::worker::model {

// The model's shape, its validator and the layer split are the job spec's (spec/gpt_config.h),
// shared with the coordinator, which validates specs and costs stages by the same rules.
using spec::GptConfig;

// Stage `options.stage` of `options.num_stages`. InvalidArgument on a bad config
// (spec::ValidateGptConfig) or stage index.
absl::StatusOr<std::unique_ptr<Stage>> MakeGptStage(const GptConfig& config,
                                                    const StageOptions& options);

// The same model in one piece with ordinary autograd (no split), for parity tests and as the
// single-process baseline. Parameter names and values equal the stages'.
class GptReference {
 public:
  static absl::StatusOr<std::unique_ptr<GptReference>> Make(const GptConfig& config, uint64_t seed,
                                                            torch::Device device = torch::kCPU,
                                                            torch::Dtype dtype = torch::kFloat32);
  ~GptReference();

  // Mean cross-entropy over all tokens of `tokens`/`targets` ([b, T] int64), with the autograd
  // graph attached (call .backward() on it). InvalidArgument on bad shapes.
  absl::StatusOr<torch::Tensor> Loss(const torch::Tensor& tokens, const torch::Tensor& targets);

  // Phases and counts describe what the split stages would report; the reference itself gets
  // every gradient from autograd.
  const std::vector<ParamInfo>& params() const;
  std::vector<torch::Tensor> parameters() const;

 private:
  struct Impl;
  explicit GptReference(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_GPT_H_
