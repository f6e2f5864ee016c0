// GPT stages on a CUDA device against the same stages on the CPU (fp32): the forward output, the
// input gradient of B and every parameter gradient after W agree within 1e-4. Skips where
// LibTorch sees no CUDA device (every CPU-only build), so the binary passes there.
#include <gtest/gtest.h>

#include "worker/model/data.h"
#include "worker/model/gpt.h"

namespace zpipe::worker::model {
namespace {

#define ZPIPE_REQUIRE_CUDA()                                                          \
  do {                                                                                \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees no CUDA device"; \
  } while (0)

constexpr double kTol = 1e-4;

GptConfig Config() {
  return GptConfig{.layers = 4, .hidden = 64, .heads = 4, .seq_len = 32, .vocab = 128};
}

std::unique_ptr<Stage> Make(int stage, int num_stages, torch::Device device) {
  StageOptions o;
  o.stage = stage;
  o.num_stages = num_stages;
  o.num_microbatches = 2;
  o.seed = 11;
  o.device = device;
  auto s = MakeGptStage(Config(), o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// max |a - b| / max(1, max |b|), on the CPU.
double RelDiff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.detach().cpu().to(torch::kFloat64);
  const torch::Tensor y = b.detach().cpu().to(torch::kFloat64);
  return (x - y).abs().max().item<double>() / std::max(1.0, y.abs().max().item<double>());
}

void ExpectSameGrads(const Stage& gpu, const Stage& cpu) {
  ASSERT_EQ(gpu.params().size(), cpu.params().size());
  for (size_t k = 0; k < cpu.params().size(); ++k) {
    const ParamInfo& g = gpu.params()[k];
    const ParamInfo& c = cpu.params()[k];
    ASSERT_EQ(g.name, c.name);
    EXPECT_TRUE(g.tensor.is_cuda()) << g.name;
    ASSERT_TRUE(c.tensor.grad().defined()) << c.name;
    ASSERT_TRUE(g.tensor.grad().defined()) << g.name;
    EXPECT_LT(RelDiff(g.tensor.grad(), c.tensor.grad()), kTol) << g.name;
  }
}

TEST(GptCudaTest, FirstAndLastStageMatchTheCpuThroughFBAndW) {
  ZPIPE_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto data = SyntheticTokenData::Make(11, Config().vocab, Config().seq_len, 2);
  ASSERT_TRUE(data.ok());
  auto cpu0 = Make(0, 2, torch::kCPU), cpu1 = Make(1, 2, torch::kCPU);
  auto gpu0 = Make(0, 2, cuda), gpu1 = Make(1, 2, cuda);
  for (int mb = 0; mb < 2; ++mb) {
    const TokenBatch batch = data->Microbatch(0, 0, mb);
    auto c_act = cpu0->Forward(mb, batch.tokens);
    auto g_act = gpu0->Forward(mb, batch.tokens);
    ASSERT_TRUE(c_act.ok() && g_act.ok()) << c_act.status() << g_act.status();
    EXPECT_TRUE(g_act->is_cuda());
    EXPECT_LT(RelDiff(*g_act, *c_act), kTol) << "stage 0 output, microbatch " << mb;
    // The last stage gets the activation on its own device, as the executor hands it over.
    ASSERT_TRUE(cpu1->Forward(mb, *c_act, &batch.targets).ok());
    ASSERT_TRUE(gpu1->Forward(mb, *g_act, &batch.targets).ok());
    EXPECT_NEAR(*gpu1->Loss(mb), *cpu1->Loss(mb), kTol * std::max(1.0f, *cpu1->Loss(mb)));
    auto c_grad = cpu1->BackwardInput(mb, torch::Tensor());
    auto g_grad = gpu1->BackwardInput(mb, torch::Tensor());
    ASSERT_TRUE(c_grad.ok() && g_grad.ok());
    EXPECT_TRUE(g_grad->is_cuda());
    EXPECT_LT(RelDiff(*g_grad, *c_grad), kTol) << "stage 1 input gradient, microbatch " << mb;
    ASSERT_TRUE(cpu0->BackwardInput(mb, *c_grad).ok());
    ASSERT_TRUE(gpu0->BackwardInput(mb, *g_grad).ok());
  }
  // W last, in reverse microbatch order, as a zero-bubble schedule may.
  for (int mb = 1; mb >= 0; --mb) {
    for (Stage* s : {cpu0.get(), cpu1.get(), gpu0.get(), gpu1.get()}) {
      ASSERT_TRUE(s->BackwardWeight(mb).ok()) << "stage " << s->stage() << " mb " << mb;
    }
  }
  ExpectSameGrads(*gpu0, *cpu0);
  ExpectSameGrads(*gpu1, *cpu1);
  EXPECT_EQ(gpu0->pending_microbatches(), 0);
  EXPECT_EQ(gpu1->pending_microbatches(), 0);
}

TEST(GptCudaTest, ActivationsCanArriveFromTheHost) {
  ZPIPE_REQUIRE_CUDA();
  // Over the TCP streams the activation arrives in host memory: the stage copies it to its device.
  const torch::Device cuda(torch::kCUDA, 0);
  auto gpu1 = Make(1, 2, cuda);
  auto data = SyntheticTokenData::Make(11, Config().vocab, Config().seq_len, 2);
  const TokenBatch batch = data->Microbatch(0, 0, 0);
  torch::Tensor act = torch::randn({2, Config().seq_len, Config().hidden});
  ASSERT_TRUE(gpu1->Forward(0, act, &batch.targets).ok());
  auto grad = gpu1->BackwardInput(0, torch::Tensor());
  ASSERT_TRUE(grad.ok()) << grad.status();
  EXPECT_TRUE(grad->is_cuda());
  EXPECT_TRUE(gpu1->BackwardWeight(0).ok());
}

}  // namespace
}  // namespace zpipe::worker::model
