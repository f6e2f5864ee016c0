// The grad-sync driver launches each bucket's all-reduce the moment its last gradient lands,
// partway through the W that completes it, rather than after the whole action: two data-parallel
// replicas (threads over Gloo) run synthetic stages whose W lands four tensors 10 ms apart.
#include "worker/executor/grad_sync_driver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/model/synthetic.h"

namespace zpipe::worker {
namespace {

constexpr int kBuckets = 4;

double Ms(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A stage that hides its inner stage's landing reports (a wrapper that does not forward them):
// gradient sync must then count it per action.
class Opaque final : public model::Stage {
 public:
  explicit Opaque(std::unique_ptr<model::Stage> inner) : inner_(std::move(inner)) {}
  int stage() const override { return inner_->stage(); }
  int num_stages() const override { return inner_->num_stages(); }
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor* targets) override {
    return inner_->Forward(mb, input, targets);
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad) override {
    return inner_->BackwardInput(mb, grad);
  }
  absl::Status BackwardWeight(int mb) override { return inner_->BackwardWeight(mb); }
  absl::StatusOr<float> Loss(int mb) const override { return inner_->Loss(mb); }
  void ClearLosses() override { inner_->ClearLosses(); }
  void FreeMicrobatch(int mb) override { inner_->FreeMicrobatch(mb); }
  int pending_microbatches() const override { return inner_->pending_microbatches(); }
  const std::vector<model::ParamInfo>& params() const override { return inner_->params(); }
  model::TensorSpec ActivationSpec(int b) const override { return inner_->ActivationSpec(b); }

 private:
  std::unique_ptr<model::Stage> inner_;
};

// Runs `iterations` of a p = 1, d = 2 job (1F1B, m = 2) and returns replica 0's summaries.
std::vector<IterationSummary> RunReplicas(bool overlap, int iterations, bool opaque = false) {
  core::ScheduleRequest req;
  req.pipeline = 1;
  req.microbatches = 2;
  req.cost = core::CostModel::Uniform(1, core::StageCost{});
  auto plan = core::GenerateSchedule(core::ScheduleKind::k1F1B, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  auto lowered = core::LowerComm(*plan);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  auto store = NewInMemoryStore();
  std::vector<IterationSummary> out;
  std::vector<absl::Status> errors(2);
  std::vector<std::thread> threads;
  for (int dr = 0; dr < 2; ++dr) {
    threads.emplace_back([&, dr] {
      auto fail = [&](absl::Status st) { errors[dr] = st; };
      CommunicatorOptions co;
      co.data_rank = dr;
      co.data_size = 2;
      co.key_prefix = absl::StrCat("driver-test/", overlap, "/", opaque, "/");
      co.timeout = absl::Seconds(30);
      auto comm = NewGlooCommunicator(co, *store);
      if (!comm.ok()) return fail(comm.status());
      model::SyntheticStageConfig sc;
      sc.forward_ms = 2;
      sc.backward_ms = 2;
      sc.weight_ms = 40;
      sc.params_mb = 0.4;  // 4 tensors of 100 kB, one per bucket
      sc.param_tensors = kBuckets;
      model::StageOptions so;
      so.num_microbatches = 2;
      auto stage = model::MakeSyntheticStage(sc, so);
      if (!stage.ok()) return fail(stage.status());
      std::vector<std::unique_ptr<model::Stage>> stages;
      if (opaque) {
        stages.push_back(std::make_unique<Opaque>(*std::move(stage)));
      } else {
        stages.push_back(*std::move(stage));
      }
      GradSyncOptions gso;
      gso.overlap = overlap;
      gso.bucket_bytes = 100'000;
      auto driver = NewGradSyncDriver(*lowered, 0, stages, gso, **comm);
      if (!driver.ok()) return fail(driver.status());
      ExecutorConfig config;
      config.optimizer = "sgd";
      config.max_grad_norm = 0;
      auto exec = Executor::Make(*lowered, 0, dr, config, std::move(stages), **comm, nullptr,
                                 driver->get(), nullptr);
      if (!exec.ok()) return fail(exec.status());
      for (int it = 0; it < iterations; ++it) {
        auto summary = (*exec)->RunIteration(it);
        if (!summary.ok()) return fail(summary.status());
        if (dr == 0) out.push_back(*summary);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : errors) EXPECT_TRUE(st.ok()) << st;
  return out;
}

// A stage whose first parameter accumulates in B (as LayerNorm's do) and whose W reads it, as a W
// that recomputes activations would: its bucket reduces after the last B, while that microbatch's
// W is still to run. The executor must not step it before the chunk is done; the W records
// whether the parameter changed under it.
class ReadsItsBParamInW final : public model::Stage {
 public:
  explicit ReadsItsBParamInW(std::unique_ptr<model::Stage> inner)
      : inner_(std::move(inner)), params_(inner_->params()) {
    params_[0].phase = model::GradPhase::kB;
  }
  int stage() const override { return inner_->stage(); }
  int num_stages() const override { return inner_->num_stages(); }
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor* targets) override {
    return inner_->Forward(mb, input, targets);
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad) override {
    return inner_->BackwardInput(mb, grad);
  }
  absl::Status BackwardWeight(int mb) override {
    const torch::Tensor before = params_[0].tensor.detach().clone();
    absl::Status s = inner_->BackwardWeight(mb);  // 40 ms: time enough for a reduce and a step
    if (!torch::equal(before, params_[0].tensor)) ++changed_under_w;
    return s;
  }
  absl::StatusOr<float> Loss(int mb) const override { return inner_->Loss(mb); }
  void ClearLosses() override { inner_->ClearLosses(); }
  void FreeMicrobatch(int mb) override { inner_->FreeMicrobatch(mb); }
  int pending_microbatches() const override { return inner_->pending_microbatches(); }
  const std::vector<model::ParamInfo>& params() const override { return params_; }
  model::TensorSpec ActivationSpec(int b) const override { return inner_->ActivationSpec(b); }

  int changed_under_w = 0;

 private:
  std::unique_ptr<model::Stage> inner_;
  std::vector<model::ParamInfo> params_;
};

TEST(GradSyncDriverTest, ABucketIsSteppedOnlyOnceItsChunkIsDone) {
  core::ScheduleRequest req;
  req.pipeline = 1;
  req.microbatches = 2;
  req.cost = core::CostModel::Uniform(1, core::StageCost{});
  auto plan = core::GenerateSchedule(core::ScheduleKind::kZbH1, req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto lowered = core::LowerComm(*plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  // The plan runs the last B before the last W: the B-phase bucket reduces first.
  const auto& actions = lowered->ranks[0];
  ASSERT_EQ(actions.back().kind, core::ActionKind::kBackwardWeight);
  auto store = NewInMemoryStore();
  std::vector<absl::Status> errors(2);
  std::vector<int> changed(2, -1), stepped(2, -1);
  std::vector<std::thread> threads;
  for (int dr = 0; dr < 2; ++dr) {
    threads.emplace_back([&, dr] {
      auto fail = [&](absl::Status st) { errors[dr] = st; };
      CommunicatorOptions co;
      co.data_rank = dr;
      co.data_size = 2;
      co.key_prefix = "driver-test/chunk-done/";
      co.timeout = absl::Seconds(30);
      auto comm = NewGlooCommunicator(co, *store);
      if (!comm.ok()) return fail(comm.status());
      model::SyntheticStageConfig sc;
      sc.forward_ms = 2;
      sc.backward_ms = 2;
      sc.weight_ms = 40;
      sc.params_mb = 0.4;
      sc.param_tensors = kBuckets;
      model::StageOptions so;
      so.num_microbatches = 2;
      auto inner = model::MakeSyntheticStage(sc, so);
      if (!inner.ok()) return fail(inner.status());
      auto stage = std::make_unique<ReadsItsBParamInW>(*std::move(inner));
      ReadsItsBParamInW* watched = stage.get();
      std::vector<std::unique_ptr<model::Stage>> stages;
      stages.push_back(std::move(stage));
      GradSyncOptions gso;
      gso.bucket_bytes = 100'000;  // one tensor per bucket
      auto driver = NewGradSyncDriver(*lowered, 0, stages, gso, **comm);
      if (!driver.ok()) return fail(driver.status());
      ExecutorConfig config;
      config.optimizer = "sgd";
      config.max_grad_norm = 0;  // the step overlaps
      auto exec = Executor::Make(*lowered, 0, dr, config, std::move(stages), **comm, nullptr,
                                 driver->get(), nullptr);
      if (!exec.ok()) return fail(exec.status());
      for (int it = 0; it < 2; ++it) {
        auto summary = (*exec)->RunIteration(it);
        if (!summary.ok()) return fail(summary.status());
        stepped[dr] = summary->overlapped_buckets;
      }
      changed[dr] = watched->changed_under_w;
    });
  }
  for (auto& t : threads) t.join();
  for (int dr = 0; dr < 2; ++dr) {
    EXPECT_TRUE(errors[dr].ok()) << errors[dr];
    EXPECT_GT(stepped[dr], 0) << "replica " << dr << ": buckets were stepped during the iteration";
    EXPECT_EQ(changed[dr], 0) << "replica " << dr << ": a W saw its chunk's parameter change";
  }
}

TEST(GradSyncDriverTest, BucketsLaunchAsTheirLastGradientLandsMidW) {
  const std::vector<IterationSummary> on = RunReplicas(/*overlap=*/true, 2);
  ASSERT_EQ(on.size(), 2u);
  for (const IterationSummary& s : on) {
    ASSERT_EQ(s.reductions.size(), static_cast<size_t>(kBuckets));
    // Launch order is layout order (last layer first), and the launches follow W's landings
    // 10 ms apart: the first bucket goes about 30 ms before the last, during the W.
    for (int k = 0; k < kBuckets; ++k) EXPECT_EQ(s.reductions[k].bucket, k);
    // (Bounds leave room for a loaded machine: a landing can only be late, by scheduling
    // noise, never early.)
    const double spread = Ms(s.reductions.front().launch, s.reductions.back().launch);
    EXPECT_GE(spread, 15) << "iteration " << s.iteration;
    for (int k = 1; k < kBuckets; ++k) {
      EXPECT_GE(Ms(s.reductions[k - 1].launch, s.reductions[k].launch), 0) << "bucket " << k;
    }
    // Only the last bucket's reduce is left after the compute: most of it overlaps.
    EXPECT_GT(s.reduce_s, 0);
    EXPECT_LT(s.exposed_reduce_s, 0.8 * s.reduce_s) << "iteration " << s.iteration;
  }
}

TEST(GradSyncDriverTest, OverlapOffLaunchesEverythingAfterTheLastAction) {
  const std::vector<IterationSummary> off = RunReplicas(/*overlap=*/false, 1);
  ASSERT_EQ(off.size(), 1u);
  const IterationSummary& s = off[0];
  ASSERT_EQ(s.reductions.size(), static_cast<size_t>(kBuckets));
  EXPECT_LT(Ms(s.reductions.front().launch, s.reductions.back().launch), 10);
  EXPECT_NEAR(s.exposed_reduce_s, s.reduce_s, 1e-3);
}

TEST(GradSyncDriverTest, AStageThatDoesNotReportLandingsIsCountedPerAction) {
  const std::vector<IterationSummary> runs = RunReplicas(/*overlap=*/true, 2, /*opaque=*/true);
  ASSERT_EQ(runs.size(), 2u);
  for (const IterationSummary& s : runs) {
    // Every bucket still reduces exactly once, launched together when the last W ends.
    ASSERT_EQ(s.reductions.size(), static_cast<size_t>(kBuckets));
    EXPECT_LT(Ms(s.reductions.front().launch, s.reductions.back().launch), 10);
  }
}

}  // namespace
}  // namespace zpipe::worker
