#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "worker/model/synthetic.h"

namespace zpipe::worker::model {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<Stage> Make(const SyntheticStageConfig& c, int stage, int num_stages, int m) {
  StageOptions o;
  o.stage = stage;
  o.num_stages = num_stages;
  o.num_microbatches = m;
  absl::StatusOr<std::unique_ptr<Stage>> s = MakeSyntheticStage(c, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(SyntheticStageTest, ActionsTakeTheConfiguredTimes) {
  SyntheticStageConfig c{/*forward_ms=*/20, /*backward_ms=*/15, /*weight_ms=*/10,
                         /*activation_kb=*/8, /*params_mb=*/1};
  const int m = 5;
  auto stage = Make(c, 1, 3, m);
  std::vector<double> f, b, w;
  const torch::Tensor in = torch::zeros({2048});
  for (int i = 0; i < m; ++i) {
    Clock::time_point t = Clock::now();
    ASSERT_TRUE(stage->Forward(i, in).ok());
    f.push_back(MsSince(t));
    t = Clock::now();
    ASSERT_TRUE(stage->BackwardInput(i, torch::zeros({2048})).ok());
    b.push_back(MsSince(t));
    t = Clock::now();
    ASSERT_TRUE(stage->BackwardWeight(i).ok());
    w.push_back(MsSince(t));
  }
  // Never early; late by at most scheduler noise: the median, with a margin of the action's own
  // length (a sleeping thread on a loaded 2-core machine wakes up to tens of ms late), which
  // still tells 20 ms from the 35 or 45 a stage running its actions together would take.
  for (double x : f) EXPECT_GE(x, 20);
  for (double x : b) EXPECT_GE(x, 15);
  for (double x : w) EXPECT_GE(x, 10);
  EXPECT_LT(Median(f), 2 * 20);
  EXPECT_LT(Median(b), 2 * 15);
  EXPECT_LT(Median(w), 2 * 10);
}

TEST(SyntheticStageTest, SleepingStagesShareCores) {
  // Eight stages on eight threads, 10 x 10 ms each: about 100 ms wall, not 800 ms on two cores.
  SyntheticStageConfig c{10, 10, 0, 1, 0};
  std::vector<std::unique_ptr<Stage>> stages;
  for (int s = 0; s < 8; ++s) stages.push_back(Make(c, s, 8, 10));
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (auto& st : stages) {
    threads.emplace_back([&st] {
      for (int i = 0; i < 10; ++i) (void)st->Forward(i, torch::Tensor());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(MsSince(start), 300);
}

TEST(SyntheticStageTest, SpinTimingIsAlsoOnTime) {
  SyntheticStageConfig c{5, 5, 5, 1, 0};
  c.timing = SyntheticStageConfig::Timing::kSpin;
  auto stage = Make(c, 0, 2, 1);
  const Clock::time_point t = Clock::now();
  ASSERT_TRUE(stage->Forward(0, torch::Tensor()).ok());
  EXPECT_GE(MsSince(t), 5);
}

TEST(SyntheticStageTest, TensorSizesFollowTheConfig) {
  SyntheticStageConfig c{0, 0, 0, /*activation_kb=*/6, /*params_mb=*/10};
  const int m = 4;
  auto first = Make(c, 0, 2, m), last = Make(c, 1, 2, m);
  EXPECT_EQ(first->OutputSpec(8).shape, std::vector<int64_t>{6 * 1024 / 4});

  // 10 MB of float32 in tensors of at most 4 MB, all with W-phase gradients.
  int64_t floats = 0;
  for (const ParamInfo& p : first->params()) {
    floats += p.tensor.numel();
    EXPECT_LE(p.tensor.numel(), 1'000'000);
    EXPECT_EQ(p.phase, GradPhase::kW);
    EXPECT_EQ(p.accumulations_per_microbatch, 1);
  }
  EXPECT_EQ(floats, 10'000'000 / 4);
  EXPECT_EQ(first->params().size(), 3u);

  float prev_loss = 1e9;
  for (int i = 0; i < m; ++i) {
    absl::StatusOr<torch::Tensor> act = first->Forward(i, torch::Tensor());
    ASSERT_TRUE(act.ok()) << act.status();
    EXPECT_EQ(act->numel(), 6 * 1024 / 4);
    EXPECT_EQ(act->scalar_type(), torch::kFloat32);
    absl::StatusOr<torch::Tensor> loss = last->Forward(i, *act);
    ASSERT_TRUE(loss.ok());
    EXPECT_EQ(loss->dim(), 0);
    EXPECT_LT(*last->Loss(i), prev_loss);
    prev_loss = *last->Loss(i);
    absl::StatusOr<torch::Tensor> g = last->BackwardFull(i, torch::Tensor());
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->numel(), 6 * 1024 / 4);
    absl::StatusOr<torch::Tensor> g0 = first->BackwardInput(i, *g);
    ASSERT_TRUE(g0.ok());
    EXPECT_FALSE(g0->defined());
  }
  // Every W adds 1/m: after B/W for all m microbatches each gradient element is exactly 1 on the
  // stage that ran W, and still absent on the one that only ran B.
  for (const ParamInfo& p : last->params()) {
    EXPECT_TRUE(torch::allclose(p.tensor.grad(), torch::ones_like(p.tensor)));
  }
  for (const ParamInfo& p : first->params()) EXPECT_FALSE(p.tensor.grad().defined());
  for (int i = 0; i < m; ++i) ASSERT_TRUE(first->BackwardWeight(i).ok());
  for (const ParamInfo& p : first->params()) {
    EXPECT_TRUE(torch::allclose(p.tensor.grad(), torch::ones_like(p.tensor)));
  }
  EXPECT_EQ(first->pending_microbatches(), 0);
  EXPECT_EQ(last->pending_microbatches(), 0);
}

TEST(SyntheticStageTest, ProtocolErrorsAndBadConfigs) {
  SyntheticStageConfig c{0, 0, 0, 1, 0};
  auto stage = Make(c, 2, 4, 2);
  absl::Status w = stage->BackwardWeight(1);
  EXPECT_EQ(w.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(w.message(), "stage 2 microbatch 1")) << w;
  EXPECT_FALSE(stage->BackwardInput(0, torch::Tensor()).ok());
  ASSERT_TRUE(stage->Forward(0, torch::zeros({256})).ok());
  EXPECT_FALSE(stage->Forward(0, torch::zeros({256})).ok());
  EXPECT_EQ(stage->Forward(1, torch::zeros({3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(stage->BackwardFull(0, torch::zeros({256})).ok());
  EXPECT_FALSE(stage->BackwardWeight(0).ok());  // W twice (BW already ran it)

  StageOptions o;
  c.forward_ms = -1;
  EXPECT_EQ(MakeSyntheticStage(c, o).status().code(), absl::StatusCode::kInvalidArgument);
  c.forward_ms = 1;
  o.stage = 3;
  EXPECT_FALSE(MakeSyntheticStage(c, o).ok());
}

TEST(SyntheticStageTest, WLandsEachTensorLastLayerFirstAtItsShareOfTheTime) {
  SyntheticStageConfig c;
  c.forward_ms = 1;
  c.backward_ms = 1;
  c.weight_ms = 40;
  c.params_mb = 0.4;
  c.param_tensors = 4;
  auto stage = Make(c, 0, 2, 1);
  ASSERT_EQ(stage->params().size(), 4u);
  for (const ParamInfo& p : stage->params()) EXPECT_EQ(p.tensor.numel(), 25'000);
  std::vector<int> landed;
  std::vector<double> at_ms;
  Clock::time_point w_start;
  stage->SetGradObserver([&](int param) {
    landed.push_back(param);
    at_ms.push_back(MsSince(w_start));
    // The gradient is already there when it is reported.
    EXPECT_TRUE(stage->params()[param].tensor.grad().defined());
  });
  ASSERT_TRUE(stage->Forward(0, torch::Tensor()).ok());
  ASSERT_TRUE(stage->BackwardInput(0, torch::zeros({0})).ok());
  EXPECT_TRUE(landed.empty()) << "nothing lands in B: every synthetic gradient is a W gradient";
  w_start = Clock::now();
  ASSERT_TRUE(stage->BackwardWeight(0).ok());
  const double w_ms = MsSince(w_start);
  EXPECT_EQ(landed, (std::vector<int>{3, 2, 1, 0}));
  ASSERT_EQ(at_ms.size(), 4u);
  // Tensor k lands after (4 - k) quarters of W, not all at the end.
  for (int k = 0; k < 4; ++k) EXPECT_GE(at_ms[k], 10.0 * (k + 1)) << "landing " << k;
  EXPECT_LT(at_ms[0], w_ms - 15) << "the first tensor must land well before W ends";
  EXPECT_GE(w_ms, 40);

  stage->SetGradObserver(nullptr);  // off again: W still runs
  ASSERT_TRUE(stage->Forward(1, torch::Tensor()).ok());
  ASSERT_TRUE(stage->BackwardInput(1, torch::zeros({0})).ok());
  ASSERT_TRUE(stage->BackwardWeight(1).ok());
  EXPECT_EQ(landed.size(), 4u);
}

// What runs between W's parts (the gradient sync's bucket launches, here a 3 ms observer) does not
// lengthen W: the parts are paced from W's start, as a GPU's W kernels run on while the host
// launches the buckets. Paced from each part's own start, W took 4 x (10 + 3) = 52 ms.
TEST(SyntheticStageTest, WorkBetweenWsPartsDoesNotAddUp) {
  SyntheticStageConfig c;
  c.forward_ms = 1;
  c.backward_ms = 1;
  c.weight_ms = 40;
  c.params_mb = 0.4;
  c.param_tensors = 4;
  auto stage = Make(c, 0, 2, 2);
  stage->SetGradObserver([](int) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); });
  for (int mb = 0; mb < 2; ++mb) {
    ASSERT_TRUE(stage->Forward(mb, torch::Tensor()).ok());
    ASSERT_TRUE(stage->BackwardInput(mb, torch::zeros({0})).ok());
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(stage->BackwardWeight(mb).ok());
    const double w_ms = MsSince(start);
    EXPECT_GE(w_ms, 40) << "microbatch " << mb;
    EXPECT_LT(w_ms, 49) << "microbatch " << mb;  // 40 + the last part's 3 ms + scheduler noise
  }
}

TEST(SyntheticStageTest, ParamTensorsSplitsEvenlyAndRejectsNegatives) {
  SyntheticStageConfig c;
  c.forward_ms = 1;
  c.backward_ms = 1;
  c.params_mb = 0.000040;  // 10 floats over 3 tensors: 4, 3, 3
  c.param_tensors = 3;
  auto stage = Make(c, 0, 1, 1);
  ASSERT_EQ(stage->params().size(), 3u);
  EXPECT_EQ(stage->params()[0].tensor.numel(), 4);
  EXPECT_EQ(stage->params()[1].tensor.numel(), 3);
  EXPECT_EQ(stage->params()[2].tensor.numel(), 3);
  c.param_tensors = -1;
  StageOptions o;
  absl::StatusOr<std::unique_ptr<Stage>> bad = MakeSyntheticStage(c, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "param_tensors")) << bad.status();
}

}  // namespace
}  // namespace zpipe::worker::model
