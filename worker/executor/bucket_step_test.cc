// Stepping a model bucket by bucket, in any order, gives the bits of one whole-model step, and the
// stepper steps a bucket only once its all-reduce has completed OK.
#include "worker/executor/bucket_step.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/completion.h"

namespace zpipe::worker {
namespace {

std::vector<torch::Tensor> MakeParams(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> out;
  for (int64_t n : {7, 64, 3, 129, 1}) out.push_back(torch::randn({n}).requires_grad_());
  return out;
}

void SetGrads(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::sin(torch::arange(params[i].numel(), torch::kFloat32) +
                                          static_cast<float>(10 * step + i));
  }
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::string& kind,
                                                       const std::vector<torch::Tensor>& params) {
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  }
  if (kind == "adam") {
    return std::make_unique<torch::optim::Adam>(params,
                                                torch::optim::AdamOptions(1e-2).weight_decay(0.1));
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(1e-2).momentum(0.9).weight_decay(0.1));
}

class StepParamsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StepParamsTest, BucketByBucketEqualsOneStepBitForBit) {
  const std::vector<torch::Tensor> whole = MakeParams(3), parts = MakeParams(3);
  auto whole_opt = MakeOptimizer(GetParam(), whole);
  auto parts_opt = MakeOptimizer(GetParam(), parts);
  for (int step = 0; step < 3; ++step) {
    SetGrads(whole, step);
    SetGrads(parts, step);
    whole_opt->step();
    // Buckets in an order unlike the parameters' (the state is per parameter, not per position).
    StepParams(*parts_opt, {parts[3], parts[0]});
    StepParams(*parts_opt, {parts[4]});
    StepParams(*parts_opt, {parts[2], parts[1]});
    // The group's own list is back as it was.
    ASSERT_EQ(parts_opt->param_groups()[0].params().size(), parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_TRUE(parts_opt->param_groups()[0].params()[i].is_same(parts[i]));
      EXPECT_TRUE(torch::equal(whole[i], parts[i]))
          << GetParam() << " step " << step << " param " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, StepParamsTest, ::testing::Values("adamw", "adam", "sgd"));

TEST(BucketStepperTest, StepsOnlyBucketsWhoseReduceSucceeded) {
  const std::vector<torch::Tensor> params = MakeParams(5);
  const std::vector<torch::Tensor> before = [&] {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : params) out.push_back(p.detach().clone());
    return out;
  }();
  SetGrads(params, 0);
  auto opt = MakeOptimizer("sgd", params);
  BucketStepper stepper(*opt, absl::Seconds(30));
  auto ok = std::make_shared<internal::Completion>();
  auto failed = std::make_shared<internal::Completion>();
  std::unique_ptr<CommHandle> ok_handle = internal::MakeHandle(ok);
  std::unique_ptr<CommHandle> failed_handle = internal::MakeHandle(failed);
  stepper.Submit({params[0], params[1]}, ok_handle.get());
  stepper.Submit({params[2]}, failed_handle.get());
  // Nothing is stepped before its reduce is done.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(torch::equal(params[0], before[0]));
  ok->Finish(absl::OkStatus());
  failed->Finish(absl::UnavailableError("peer gone"));
  BucketStepper::Drained d = stepper.Drain();
  EXPECT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.buckets, 1);
  EXPECT_EQ(d.stepped.size(), 2u);
  EXPECT_TRUE(d.stepped.count(params[0].unsafeGetTensorImpl()));
  EXPECT_FALSE(d.stepped.count(params[2].unsafeGetTensorImpl()));
  EXPECT_FALSE(torch::equal(params[0], before[0]));
  EXPECT_FALSE(torch::equal(params[1], before[1]));
  EXPECT_TRUE(torch::equal(params[2], before[2]));
  // A second Drain reports only what came after the first.
  EXPECT_EQ(stepper.Drain().buckets, 0);
}

TEST(BucketStepperTest, AbandonDoesNotWaitOutAStuckReduce) {
  const std::vector<torch::Tensor> params = MakeParams(6);
  const torch::Tensor before = params[0].detach().clone();
  SetGrads(params, 0);
  auto opt = MakeOptimizer("adamw", params);
  auto stuck = std::make_shared<internal::Completion>();
  std::unique_ptr<CommHandle> handle = internal::MakeHandle(stuck);
  {
    BucketStepper stepper(*opt, absl::Minutes(5));
    stepper.Submit({params[0]}, handle.get());
    stepper.Submit({params[1]}, handle.get());
    const auto t0 = std::chrono::steady_clock::now();
    stepper.Abandon();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    // Completing it now steps nothing: the work was dropped.
    stuck->Finish(absl::OkStatus());
    EXPECT_EQ(stepper.Drain().buckets, 0);
  }
  EXPECT_TRUE(torch::equal(params[0], before));
}

}  // namespace
}  // namespace zpipe::worker
