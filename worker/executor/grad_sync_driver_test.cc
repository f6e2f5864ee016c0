// The grad-sync driver launches each bucket's all-reduce the moment its last gradient lands,
// partway through the W that completes it, rather than after the whole action: two data-parallel
// replicas (threads over the TCP streams) run synthetic stages whose W lands four tensors 10 ms apart.
#include "worker/executor/grad_sync_driver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "worker/comm/tcp_communicator.h"
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
class Opaque : public model::Stage {
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
  model::TensorSpec InputSpec(int b) const override { return inner_->InputSpec(b); }
  model::TensorSpec OutputSpec(int b) const override { return inner_->OutputSpec(b); }

 private:
  std::unique_ptr<model::Stage> inner_;
};

// An opaque stage whose first parameter accumulates in B (as LayerNorm's do) and whose W reads
// it, as a W that recomputes activations would. On a plan whose last W follows the last B, that
// parameter's bucket reduces while the W is still to run; the executor must not step it before
// the chunk is done. Each W that sees the parameter change under it adds one to `*changed`.
class ReadsItsBParamInW final : public Opaque {
 public:
  ReadsItsBParamInW(std::unique_ptr<model::Stage> inner, int* changed)
      : Opaque(std::move(inner)), params_(Opaque::params()), changed_(changed) {
    params_[0].phase = model::GradPhase::kB;
  }
  absl::Status BackwardWeight(int mb) override {
    const torch::Tensor before = params_[0].tensor.detach().clone();
    absl::Status s = Opaque::BackwardWeight(mb);  // 40 ms: time enough for a reduce and a step
    if (!torch::equal(before, params_[0].tensor)) ++*changed_;
    return s;
  }
  const std::vector<model::ParamInfo>& params() const override { return params_; }

 private:
  std::vector<model::ParamInfo> params_;
  int* changed_;
};

// The lowered plan of a p = 1 job with m = 2.
core::Plan SingleRankPlan(core::ScheduleKind kind) {
  core::ScheduleRequest req;
  req.pipeline = 1;
  req.microbatches = 2;
  req.cost = core::CostModel::Uniform(1, core::StageCost{});
  auto plan = core::GenerateSchedule(kind, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  auto lowered = core::LowerComm(*plan);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  return *lowered;
}

struct Replicas {
  core::ScheduleKind kind = core::ScheduleKind::k1F1B;
  bool overlap = true;
  // Wraps replica `dr`'s synthetic stage; unset: the stage as it is.
  std::function<std::unique_ptr<model::Stage>(int dr, std::unique_ptr<model::Stage>)> wrap;
};

// Runs `iterations` of a p = 1, d = 2 job (m = 2) and returns each replica's summaries.
std::vector<std::vector<IterationSummary>> RunReplicas(const Replicas& r, const std::string& name,
                                                       int iterations) {
  const core::Plan lowered = SingleRankPlan(r.kind);
  auto store = NewInMemoryStore();
  std::vector<std::vector<IterationSummary>> out(2);
  std::vector<absl::Status> errors(2);
  std::vector<std::thread> threads;
  for (int dr = 0; dr < 2; ++dr) {
    threads.emplace_back([&, dr] {
      auto fail = [&](absl::Status st) { errors[dr] = st; };
      CommunicatorOptions co;
      co.data_rank = dr;
      co.data_size = 2;
      co.key_prefix = absl::StrCat("driver-test/", name, "/");
      co.timeout = absl::Seconds(30);
      auto comm = NewTcpCommunicator(co, *store);
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
      stages.push_back(r.wrap ? r.wrap(dr, *std::move(stage)) : *std::move(stage));
      GradSyncOptions gso;
      gso.overlap = r.overlap;
      gso.bucket_bytes = 100'000;
      auto driver = NewGradSyncDriver(lowered, 0, stages, gso, **comm);
      if (!driver.ok()) return fail(driver.status());
      ExecutorConfig config;
      config.optimizer = Optimizer::kSgd;
      config.max_grad_norm = 0;  // the step overlaps
      auto exec = Executor::Make(lowered, 0, dr, config, std::move(stages), **comm, nullptr,
                                 driver->get(), nullptr);
      if (!exec.ok()) return fail(exec.status());
      for (int it = 0; it < iterations; ++it) {
        auto summary = (*exec)->RunIteration(it);
        if (!summary.ok()) return fail(summary.status());
        out[dr].push_back(*summary);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : errors) EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Replica 0's summaries of a 1F1B job.
std::vector<IterationSummary> RunReplicas(bool overlap, int iterations, bool opaque = false) {
  Replicas r;
  r.overlap = overlap;
  if (opaque) {
    r.wrap = [](int, std::unique_ptr<model::Stage> s) -> std::unique_ptr<model::Stage> {
      return std::make_unique<Opaque>(std::move(s));
    };
  }
  return RunReplicas(r, absl::StrCat(overlap, "/", opaque), iterations)[0];
}

TEST(GradSyncDriverTest, ABucketIsSteppedOnlyOnceItsChunkIsDone) {
  // The plan runs the last B before the last W: the B-phase bucket reduces first.
  ASSERT_EQ(SingleRankPlan(core::ScheduleKind::kZbH1).ranks[0].back().kind,
            core::ActionKind::kBackwardWeight);
  std::vector<int> changed(2, 0);
  Replicas r;
  r.kind = core::ScheduleKind::kZbH1;
  r.wrap = [&](int dr, std::unique_ptr<model::Stage> s) -> std::unique_ptr<model::Stage> {
    return std::make_unique<ReadsItsBParamInW>(std::move(s), &changed[dr]);
  };
  const std::vector<std::vector<IterationSummary>> runs = RunReplicas(r, "chunk-done", 2);
  for (int dr = 0; dr < 2; ++dr) {
    ASSERT_EQ(runs[dr].size(), 2u);
    EXPECT_GT(runs[dr].back().overlapped_buckets, 0)
        << "replica " << dr << ": buckets were stepped during the iteration";
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
    // The first bucket's reduce runs while the W still computes: it starts before the last bucket
    // is launched, at the end of the W's last part. (How much of the reduce time overlaps is a
    // measure of the machine: with six of these tests on two cores a replica's comm thread can
    // wait for the other replica past the W's end, and 0.3 of 3.8 ms overlapped.)
    EXPECT_LT(s.reductions.front().start, s.reductions.back().launch)
        << "iteration " << s.iteration;
    EXPECT_GT(s.reduce_s, 0);
    EXPECT_LT(s.exposed_reduce_s, s.reduce_s) << "iteration " << s.iteration;
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
