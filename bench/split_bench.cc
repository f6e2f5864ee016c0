// Split backward benchmark (scripts/bench split): what SplitBackward's B/W split costs against a
// plain backward() of the same graph, for one transformer block (hidden 256, 4 heads, seq 128,
// batch 4, float32, CPU, one intra-op thread), as a torch::nn module and as TorchScript (per-op
// graph).
//
// Each iteration runs a forward and times backward() (T_BW), then another forward and times
// Make + B (T_B) and W (T_W); forwards are not timed, and the two halves alternate so that load
// from elsewhere on the machine hits both alike. Parameters keep a .grad (zeroed in place, as in
// training with bucket views), so both paths accumulate in place. Counters: milliseconds per
// microbatch and ratio = (T_B + T_W) / T_BW; the goal is <= 1.2.
#include <benchmark/benchmark.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/split_backward.h"
#include "worker/model/testing/transformer_block.h"

namespace zpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using worker::model::SplitBackward;

constexpr int64_t kHidden = 256;
constexpr int64_t kHeads = 4;
constexpr int64_t kSeq = 128;
constexpr int64_t kBatch = 4;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void ZeroGrads(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void RunSplitVsFull(benchmark::State& state, const std::function<torch::Tensor(torch::Tensor)>& f,
                    const std::vector<torch::Tensor>& params) {
  torch::set_num_threads(1);
  torch::manual_seed(0);
  const torch::Tensor input = torch::randn({kBatch, kSeq, kHidden});
  const torch::Tensor grad_output = torch::randn({kBatch, kSeq, kHidden});
  const auto leaf = [&] { return input.detach().clone().requires_grad_(true); };
  f(leaf()).backward(grad_output);  // warm-up; creates every .grad

  double full = 0, b = 0, w = 0, make = 0;
  int passes = 0;
  bool split = true;
  for (auto _ : state) {
    ZeroGrads(params);
    torch::Tensor y = f(leaf());
    Clock::time_point t0 = Clock::now();
    y.backward(grad_output);
    Clock::time_point t1 = Clock::now();
    const double full_once = Seconds(t0, t1);
    full += full_once;
    y = torch::Tensor();

    ZeroGrads(params);
    torch::Tensor x = leaf();
    y = f(x);
    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<SplitBackward>> sb = SplitBackward::Make(y, x, params);
    if (!sb.ok()) {
      state.SkipWithError(std::string(sb.status().message()).c_str());
      return;
    }
    const Clock::time_point t_made = Clock::now();
    absl::StatusOr<torch::Tensor> grad_input = (*sb)->RunInput(grad_output);
    t1 = Clock::now();
    absl::Status weight = (*sb)->RunWeight();
    const Clock::time_point t2 = Clock::now();
    if (!grad_input.ok() || !weight.ok()) {
      state.SkipWithError(
          std::string((grad_input.ok() ? weight : grad_input.status()).message()).c_str());
      return;
    }
    make += Seconds(t0, t_made);
    b += Seconds(t0, t1);
    w += Seconds(t1, t2);
    passes = (*sb)->num_weight_passes();
    split = (*sb)->split();
    state.SetIterationTime(full_once + Seconds(t0, t2));  // both backwards, no forwards
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["T_BW_ms"] = full / n * 1e3;
  state.counters["T_B_ms"] = b / n * 1e3;
  state.counters["T_W_ms"] = w / n * 1e3;
  state.counters["make_ms"] = make / n * 1e3;  // graph walk, included in T_B
  state.counters["ratio"] = (b + w) / full;
  state.counters["W_passes"] = passes;
  state.counters["split"] = split ? 1 : 0;
}

void BM_TorchModuleBlock(benchmark::State& state) {
  torch::manual_seed(1);
  worker::model::testing::TransformerBlock block(kHidden, kHeads);
  RunSplitVsFull(
      state, [&](const torch::Tensor& x) { return block(x); }, block->parameters());
}

void BM_TorchScriptBlock(benchmark::State& state) {
  torch::manual_seed(1);
  torch::jit::GraphOptimizerEnabledGuard per_op_graph(false);
  torch::jit::Module block =
      worker::model::testing::ScriptedTransformerBlock(kHidden, kHeads, torch::kFloat32);
  RunSplitVsFull(
      state, [&](const torch::Tensor& x) { return block.forward({x}).toTensor(); },
      worker::model::testing::ParametersOf(block));
}

BENCHMARK(BM_TorchModuleBlock)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(3);
BENCHMARK(BM_TorchScriptBlock)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(3);

}  // namespace
}  // namespace zpipe::bench

BENCHMARK_MAIN();
