// The executor against the single-process reference: p pipeline ranks run as threads talking
// the TCP streams over loopback, every schedule that admits the shape; after one iteration every
// parameter's gradient matches the reference's autograd gradient, and over several iterations
// the loss curves match.
#include "worker/executor/executor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/recompute.h"
#include "core/schedule.h"
#include "core/validator.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/executor/testing/pipeline_harness.h"
#include "worker/model/gpt.h"

namespace zpipe::worker {
namespace {

constexpr uint64_t kSeed = 7;
constexpr int kMicrobatchSize = 2;

model::GptConfig SmallGpt(int stages) {
  return model::GptConfig{
      .layers = std::max(4, stages), .hidden = 16, .heads = 2, .seq_len = 8, .vocab = 32};
}

struct PipelineResult {
  std::vector<double> losses;                   // per iteration, from the last stage's rank
  std::map<std::string, torch::Tensor> grads;   // after the last iteration, before the next
  std::map<std::string, torch::Tensor> params;  // after the last iteration's step
  std::vector<IterationSummary> rank0;
};

class Recorder : public ActionSink {
 public:
  void OnAction(const ActionRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  std::vector<ActionRecord> records() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  std::mutex mu_;
  std::vector<ActionRecord> records_;
};

struct DataParallel {
  int d = 1;
  bool overlap = true;
  int64_t bucket_bytes = 4096;  // small: several buckets per stage
};

// Runs the lowered plan `lowered` on p x dp.d threads; `name` keys its communicators.
absl::StatusOr<PipelineResult> RunPlan(const core::Plan& plan, const std::string& name,
                                       int iterations, const ExecutorConfig& config,
                                       std::vector<Recorder>* recorders = nullptr,
                                       DataParallel dp = {}) {
  const core::Plan* lowered = &plan;
  const int p = plan.num_ranks();
  testing::RankOptions ro;
  ro.key_prefix = absl::StrCat("exec-test/", name, "/");
  ro.data_size = dp.d;
  ro.gpt = SmallGpt(lowered->num_stages());
  ro.init_seed = kSeed;
  ro.config = config;
  ro.grad_sync.overlap = dp.overlap;
  ro.grad_sync.bucket_bytes = dp.bucket_bytes;
  auto data = model::SyntheticTokenData::Make(kSeed, ro.gpt.vocab, ro.gpt.seq_len, kMicrobatchSize);
  if (!data.ok()) return data.status();
  auto store = NewInMemoryStore();
  std::mutex mu;
  PipelineResult result;
  result.losses.assign(iterations, 0);
  absl::Status status = testing::RunOnThreads(p * dp.d, [&](int g) -> absl::Status {
    const int r = g % p, dr = g / p;
    auto rank = testing::MakePipelineRank(*lowered, r, dr, ro, *store, &*data,
                                          recorders && dr == 0 ? &(*recorders)[r] : nullptr);
    if (!rank.ok()) return rank.status();
    Executor& exec = *rank->exec;
    for (int it = 0; it < iterations; ++it) {
      auto summary = exec.RunIteration(it);
      if (!summary.ok()) return summary.status();
      std::lock_guard<std::mutex> lock(mu);
      if (summary->loss) result.losses[it] += *summary->loss / dp.d;
      if (r == 0 && dr == 0) result.rank0.push_back(*summary);
    }
    if (dr != 0) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& stage : exec.stages()) {
      for (const model::ParamInfo& pi : stage->params()) {
        result.grads[pi.name] =
            pi.tensor.grad().defined() ? pi.tensor.grad().clone() : torch::zeros_like(pi.tensor);
        result.params[pi.name] = pi.tensor.detach().clone();
      }
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<PipelineResult> RunPipeline(core::ScheduleKind kind, int p, int m, int iterations,
                                           const ExecutorConfig& config,
                                           std::vector<Recorder>* recorders = nullptr,
                                           DataParallel dp = {}) {
  auto lowered = testing::LoweredPlan(kind, p, m);
  if (!lowered.ok()) return lowered.status();
  return RunPlan(*lowered, std::string(core::ScheduleName(kind)), iterations, config, recorders,
                 dp);
}

// The reference: the same model in one piece, same data, same optimizer and clipping.
struct ReferenceResult {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> grads;
};

ReferenceResult RunReference(int stages, int m, int iterations, const ExecutorConfig& config,
                             int d = 1) {
  const model::GptConfig gpt = SmallGpt(stages);
  auto ref = model::GptReference::Make(gpt, kSeed);
  EXPECT_TRUE(ref.ok()) << ref.status();
  auto data = model::SyntheticTokenData::Make(kSeed, gpt.vocab, gpt.seq_len, kMicrobatchSize);
  auto params = (*ref)->parameters();
  torch::optim::AdamW opt(
      params, torch::optim::AdamWOptions(config.lr).weight_decay(config.weight_decay_or_default()));
  ReferenceResult out;
  for (int it = 0; it < iterations; ++it) {
    opt.zero_grad();
    double loss_sum = 0;
    for (int dr = 0; dr < d; ++dr) {
      for (int i = 0; i < m; ++i) {
        model::TokenBatch b = data->Microbatch(it, dr, i);
        auto loss = (*ref)->Loss(b.tokens, b.targets);
        EXPECT_TRUE(loss.ok());
        loss_sum += loss->item<double>();
        (*loss / (m * d)).backward();
      }
    }
    out.losses.push_back(loss_sum / (m * d));
    out.grads.clear();
    for (const model::ParamInfo& pi : (*ref)->params())
      out.grads[pi.name] = pi.tensor.grad().clone();
    if (config.max_grad_norm > 0) torch::nn::utils::clip_grad_norm_(params, config.max_grad_norm);
    opt.step();
  }
  return out;
}

struct Case {
  core::ScheduleKind kind;
  int p;
  int m;
  int d = 1;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = absl::StrCat(core::ScheduleName(info.param.kind), "_p", info.param.p, "_m",
                                  info.param.m, "_d", info.param.d);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

class ExecutorParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorParityTest, GradientsMatchReferenceAfterOneIteration) {
  const Case c = GetParam();
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  config.max_grad_norm = 0;
  auto result = RunPipeline(c.kind, c.p, c.m, 1, config, nullptr, DataParallel{.d = c.d});
  ASSERT_TRUE(result.ok()) << result.status();
  const int stages = core::PlacementFor(c.kind, c.p).num_stages();
  ReferenceResult ref = RunReference(stages, c.m, 1, config, c.d);
  ASSERT_EQ(result->grads.size(), ref.grads.size());
  for (const auto& [name, want] : ref.grads) {
    ASSERT_TRUE(result->grads.count(name)) << name;
    const torch::Tensor& got = result->grads.at(name);
    const double scale = std::max(want.abs().max().item<double>(), 1e-6);
    const double err = (got - want).abs().max().item<double>() / scale;
    EXPECT_LT(err, 1e-5) << name;
  }
  EXPECT_NEAR(result->losses[0], ref.losses[0], 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ExecutorParityTest,
    ::testing::Values(
        Case{core::ScheduleKind::k1F1B, 2, 4}, Case{core::ScheduleKind::k1F1B, 4, 8},
        Case{core::ScheduleKind::kGpipe, 2, 3}, Case{core::ScheduleKind::kInterleaved1F1B, 2, 4},
        Case{core::ScheduleKind::kZbH1, 2, 4}, Case{core::ScheduleKind::kZbH2, 4, 8},
        Case{core::ScheduleKind::kZb1p, 4, 8}, Case{core::ScheduleKind::kZb2p, 2, 4},
        Case{core::ScheduleKind::kZbV, 2, 4}, Case{core::ScheduleKind::kZbV, 4, 8},
        Case{core::ScheduleKind::kVHalf, 4, 8}, Case{core::ScheduleKind::kVMin, 4, 8},
        Case{core::ScheduleKind::kDualPipeV, 2, 4}, Case{core::ScheduleKind::k1F1B, 2, 4, 2},
        Case{core::ScheduleKind::kZbV, 2, 4, 2}, Case{core::ScheduleKind::kZb2p, 2, 4, 2},
        Case{core::ScheduleKind::kInterleaved1F1B, 2, 4, 2},
        Case{core::ScheduleKind::kVMin, 2, 6, 2}, Case{core::ScheduleKind::kDualPipeV, 2, 4, 2},
        Case{core::ScheduleKind::kZbV, 4, 8, 2}, Case{core::ScheduleKind::kZbH1, 4, 8, 2},
        // 4 layers on 3 stages: an uneven split (2, 1, 1), data parallel.
        Case{core::ScheduleKind::kZbH1, 3, 6, 2}),
    CaseName);

TEST(ExecutorTest, DataParallelLossCurveMatchesReferenceWithOverlapOnAndOff) {
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  config.lr = 3e-3;
  ReferenceResult ref = RunReference(4, 4, 10, config, 2);
  for (bool overlap : {true, false}) {
    auto result = RunPipeline(core::ScheduleKind::kZbV, 2, 4, 10, config, nullptr,
                              DataParallel{.d = 2, .overlap = overlap});
    ASSERT_TRUE(result.ok()) << result.status();
    for (int it = 0; it < 10; ++it) {
      EXPECT_NEAR(result->losses[it], ref.losses[it], 1e-4) << "overlap=" << overlap << " " << it;
    }
    const IterationSummary& s = result->rank0.back();
    EXPECT_GT(s.reductions.size(), 1u) << "several buckets per rank";
    EXPECT_GT(s.reduce_s, 0);
    EXPECT_LE(s.exposed_reduce_s, s.reduce_s + 1e-9);
  }
}

// Without clipping, a data-parallel rank steps each bucket as soon as it has reduced and its chunk
// is done; the model trains to the same bits as with one step after the last reduction. ZB-2p
// defers W, so buckets of B-phase parameters (LayerNorm, biases) reduce while their chunk still
// has Ws to run; they wait for the chunk.
TEST(ExecutorTest, SteppingBucketsAsTheyReduceTrainsTheSameBits) {
  for (core::ScheduleKind kind : {core::ScheduleKind::kZbV, core::ScheduleKind::kZb2p}) {
    std::map<bool, PipelineResult> runs;
    for (bool overlap_step : {true, false}) {
      ExecutorConfig config;
      config.microbatch_size = kMicrobatchSize;
      config.lr = 3e-3;
      config.max_grad_norm = 0;
      config.overlap_step = overlap_step;
      auto result = RunPipeline(kind, 2, 4, 3, config, nullptr, DataParallel{.d = 2});
      ASSERT_TRUE(result.ok()) << result.status();
      for (const IterationSummary& s : result->rank0) {
        if (overlap_step) {
          // Most buckets were stepped during the iteration: all but those of the rank's last
          // chunk to finish, at most.
          EXPECT_GT(s.overlapped_buckets, 0) << core::ScheduleName(kind);
          EXPECT_LE(s.overlapped_buckets, static_cast<int>(s.reductions.size()));
          EXPECT_GT(s.overlapped_step_s, 0);
        } else {
          EXPECT_EQ(s.overlapped_buckets, 0);
        }
      }
      runs[overlap_step] = *std::move(result);
    }
    EXPECT_EQ(runs[true].losses, runs[false].losses) << core::ScheduleName(kind);
    ASSERT_EQ(runs[true].params.size(), runs[false].params.size());
    for (const auto& [name, want] : runs[false].params) {
      EXPECT_TRUE(torch::equal(runs[true].params.at(name), want))
          << core::ScheduleName(kind) << " " << name;
    }
  }
}

// `kind`'s plan, and the same plan with an R before every backward (each pulled as early into
// idle time as the planner pulls it), both lowered.
std::pair<core::Plan, core::Plan> PlanWithAndWithoutRecompute(core::ScheduleKind kind, int p,
                                                              int m) {
  core::PlanRequest req;
  req.schedule = std::string(core::ScheduleName(kind));
  req.pipeline = p;
  req.microbatches = m;
  req.lower = false;
  req.inputs = [](const core::Placement& placement) {
    return core::UniformInputs(placement, core::StageCost{});
  };
  absl::StatusOr<core::PlannedSchedule> planned = core::PlanSchedule(req);
  EXPECT_TRUE(planned.ok()) << planned.status();
  const core::Plan& keep = planned->plan;
  const std::vector<bool> every(keep.num_stages(), true);
  const core::Plan with_r =
      core::HoistRecompute(core::InsertRecompute(keep, every), planned->cost, 1e9);
  EXPECT_TRUE(core::ValidatePlan(with_r).ok());
  return {*core::LowerComm(keep), *core::LowerComm(with_r)};
}

// Issue 34: training with recomputation equals training without, bit for bit on the CPU: the
// same losses, gradients and weights after three steps, through the real executor (TCP streams,
// GPT stages, gradient sync with data parallelism), with R actions reported as they run.
TEST(ExecutorTest, RecomputationTrainsTheSameBits) {
  for (core::ScheduleKind kind :
       {core::ScheduleKind::kZbV, core::ScheduleKind::kZb1p, core::ScheduleKind::k1F1B}) {
    const auto [keep, with_r] = PlanWithAndWithoutRecompute(kind, 2, 4);
    ExecutorConfig config;
    config.microbatch_size = kMicrobatchSize;
    config.lr = 3e-3;
    const std::string name(core::ScheduleName(kind));
    std::vector<Recorder> recorders(2);
    auto kept = RunPlan(keep, name + "/keep", 3, config, nullptr, DataParallel{.d = 2});
    auto recomputed =
        RunPlan(with_r, name + "/recompute", 3, config, &recorders, DataParallel{.d = 2});
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_TRUE(recomputed.ok()) << recomputed.status();
    EXPECT_EQ(recomputed->losses, kept->losses) << name;
    ASSERT_EQ(recomputed->params.size(), kept->params.size());
    for (const auto& [param, want] : kept->params) {
      EXPECT_TRUE(torch::equal(recomputed->params.at(param), want)) << name << " " << param;
      EXPECT_TRUE(torch::equal(recomputed->grads.at(param), kept->grads.at(param)))
          << name << " " << param;
    }
    int recomputes = 0;
    for (Recorder& r : recorders) {
      for (const ActionRecord& record : r.records()) {
        recomputes += record.action.kind == core::ActionKind::kRecompute;
      }
    }
    EXPECT_EQ(recomputes, 3 * with_r.num_stages() * 4) << name;  // iterations x stages x m
  }
}

TEST(ExecutorTest, ClippingStepsEveryBucketAfterTheLastReduction) {
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  config.max_grad_norm = 1.0;  // needs every gradient before any step
  auto result =
      RunPipeline(core::ScheduleKind::kZbV, 2, 4, 1, config, nullptr, DataParallel{.d = 2});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->rank0.back().overlapped_buckets, 0);
  EXPECT_GT(result->rank0.back().reductions.size(), 1u);
}

TEST(ExecutorTest, LossCurveMatchesReferenceOverTwentyIterations) {
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  config.lr = 3e-3;
  auto result = RunPipeline(core::ScheduleKind::kZbV, 2, 4, 20, config);
  ASSERT_TRUE(result.ok()) << result.status();
  ReferenceResult ref = RunReference(4, 4, 20, config);
  for (int it = 0; it < 20; ++it) EXPECT_NEAR(result->losses[it], ref.losses[it], 1e-4) << it;
  EXPECT_LT(result->losses.back(), result->losses.front() - 0.1);
}

TEST(ExecutorTest, ReportsEveryActionInPlanOrderWithMeasurements) {
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  std::vector<Recorder> recorders(2);
  auto result = RunPipeline(core::ScheduleKind::kZbH1, 2, 4, 1, config, &recorders);
  ASSERT_TRUE(result.ok()) << result.status();
  auto plan = testing::LoweredPlan(core::ScheduleKind::kZbH1, 2, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Sends by (kind, stage, microbatch), for matching the receives across ranks.
  std::map<std::tuple<core::ActionKind, int, int>, ActionRecord> sends;
  std::vector<ActionRecord> recvs;
  for (int r = 0; r < 2; ++r) {
    std::vector<core::Action> planned_compute;
    std::multiset<std::string> planned_comm, comm;
    for (const core::Action& a : plan->ranks[r]) {
      if (core::IsCompute(a.kind)) planned_compute.push_back(a);
      if (core::IsComm(a.kind)) planned_comm.insert(core::ActionToString(a));
    }
    std::vector<ActionRecord> compute;
    for (const ActionRecord& rec : recorders[r].records()) {
      EXPECT_EQ(rec.iteration, 0);
      EXPECT_LE(rec.start_s, rec.end_s) << core::ActionToString(rec.action);
      if (core::IsCompute(rec.action.kind)) compute.push_back(rec);
      if (!core::IsComm(rec.action.kind)) continue;
      comm.insert(core::ActionToString(rec.action));
      if (core::IsSend(rec.action.kind)) {
        sends[{rec.action.kind, rec.action.stage, rec.action.microbatch}] = rec;
      } else {
        recvs.push_back(rec);
      }
    }
    // Compute actions in plan order, one after the other; every send and receive once.
    ASSERT_EQ(compute.size(), planned_compute.size());
    for (size_t k = 0; k < compute.size(); ++k) {
      EXPECT_EQ(compute[k].action, planned_compute[k]);
      if (k > 0) {
        EXPECT_LE(compute[k - 1].end_s, compute[k].start_s);
      }
    }
    EXPECT_EQ(comm, planned_comm) << "rank " << r;
  }
  // One process, one clock: the data arrives after it was sent.
  ASSERT_EQ(recvs.size(), 8u);  // 4 activations and 4 gradients
  for (const ActionRecord& recv : recvs) {
    const core::ActionKind send_kind = recv.action.kind == core::ActionKind::kRecvAct
                                           ? core::ActionKind::kSendAct
                                           : core::ActionKind::kSendGrad;
    auto it = sends.find({send_kind, recv.action.stage, recv.action.microbatch});
    ASSERT_NE(it, sends.end()) << core::ActionToString(recv.action);
    EXPECT_GE(recv.end_s, it->second.start_s) << core::ActionToString(recv.action);
  }
  const IterationSummary& s = result->rank0[0];
  EXPECT_GT(s.duration_s, 0);
  EXPECT_GT(s.busy_s, 0);
  EXPECT_NEAR(s.busy_s, s.forward_s + s.backward_s + s.weight_s, 1e-9);
  EXPECT_NEAR(s.idle_s, s.duration_s - s.busy_s, 1e-9);
  EXPECT_GT(s.tokens, 0);
}

// With data parallelism every reduction of the iteration reaches the sink too, once per bucket,
// with the times the reduce-overlap accounting uses.
TEST(ExecutorTest, ReportsEveryReduction) {
  ExecutorConfig config;
  config.microbatch_size = kMicrobatchSize;
  std::vector<Recorder> recorders(2);
  auto result = RunPipeline(core::ScheduleKind::kZbH1, 2, 4, 1, config, &recorders,
                            DataParallel{.d = 2, .overlap = true});
  ASSERT_TRUE(result.ok()) << result.status();
  std::set<std::pair<int, int>> reduced;
  double reduce_s = 0;
  for (const ActionRecord& rec : recorders[0].records()) {
    if (rec.action.kind != core::ActionKind::kReduce) continue;
    EXPECT_TRUE(reduced.insert({rec.action.chunk, rec.action.bucket}).second)
        << core::ActionToString(rec.action) << " twice";
    EXPECT_LE(rec.start_s, rec.end_s);
    reduce_s += rec.end_s - rec.start_s;
  }
  const IterationSummary& s = result->rank0[0];
  EXPECT_GT(s.reductions.size(), 1u);  // small buckets: several per stage
  EXPECT_EQ(reduced.size(), s.reductions.size());
  EXPECT_NEAR(reduce_s, s.reduce_s, 1e-6);
}

TEST(ExecutorTest, RejectsStagesThatDoNotMatchThePlacement) {
  core::Plan plan = core::EmptyPlan("x", core::Placement::Linear(2), 1);
  auto store = NewInMemoryStore();
  CommunicatorOptions opts;
  opts.pipeline_size = 1;
  auto comm = NewTcpCommunicator(opts, *store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto exec = Executor::Make(plan, 0, 0, {}, {}, **comm, nullptr, nullptr, nullptr);
  ASSERT_FALSE(exec.ok());
  EXPECT_NE(exec.status().message().find("0 stages given"), std::string::npos) << exec.status();
}

}  // namespace
}  // namespace zpipe::worker

namespace zpipe::worker {
namespace {

// Stage 0 of two: F sends microbatch mb of iteration it as a tensor filled with 100 it + mb.
// Stage 1 keeps every input it receives until that microbatch's W, then checks it still holds
// what was sent: receive buffers are pooled, and one must never be reused while a stage holds it.
class KeepingStage final : public model::Stage {
 public:
  KeepingStage(int stage, int64_t floats) : stage_(stage), floats_(floats) {}
  int stage() const override { return stage_; }
  int num_stages() const override { return 2; }
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor*) override {
    ++pending_;
    if (stage_ == 0) return torch::full({floats_}, 100.0f * iteration_ + mb);
    kept_[mb] = input;  // the received tensor itself, as autograd would save it
    return torch::full({}, 1.0f);
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int, const torch::Tensor&) override {
    return torch::zeros({floats_});
  }
  absl::Status BackwardWeight(int mb) override {
    --pending_;
    if (stage_ == 1) {
      const float want = 100.0f * iteration_ + mb;
      if (!torch::equal(kept_[mb], torch::full({floats_}, want))) {
        return absl::InternalError(absl::StrCat("input of microbatch ", mb, " of iteration ",
                                                iteration_, " was overwritten while held"));
      }
      kept_.erase(mb);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<float> Loss(int) const override { return 1.0f; }
  void ClearLosses() override { ++iteration_; }  // called once at the start of every iteration
  void FreeMicrobatch(int) override {}
  int pending_microbatches() const override { return pending_; }
  const std::vector<model::ParamInfo>& params() const override { return params_; }
  model::TensorSpec InputSpec(int) const override { return {{floats_}, torch::kFloat32}; }
  model::TensorSpec OutputSpec(int) const override { return {{floats_}, torch::kFloat32}; }

 private:
  int stage_;
  int64_t floats_;
  int iteration_ = -1;
  int pending_ = 0;
  std::map<int, torch::Tensor> kept_;
  std::vector<model::ParamInfo> params_;
};

TEST(ExecutorTest, PooledReceiveBuffersAreNeverReusedWhileAStageHoldsThem) {
  // GPipe: rank 1 holds every received input of the iteration before its first backward.
  auto plan = testing::LoweredPlan(core::ScheduleKind::kGpipe, 2, 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto store = NewInMemoryStore();
  absl::Status st = testing::RunOnThreads(2, [&](int rank) -> absl::Status {
    CommunicatorOptions o;
    o.pipeline_rank = rank;
    o.pipeline_size = 2;
    o.key_prefix = "pool/";
    auto comm = NewTcpCommunicator(o, *store);
    if (!comm.ok()) return comm.status();
    std::vector<std::unique_ptr<model::Stage>> stages;
    stages.push_back(std::make_unique<KeepingStage>(rank, 4096));
    ExecutorConfig config;
    config.optimizer = Optimizer::kSgd;
    config.max_grad_norm = 0;
    config.timeout = absl::Seconds(30);
    auto exec = Executor::Make(*plan, rank, 0, config, std::move(stages), **comm, nullptr, nullptr,
                               nullptr);
    if (!exec.ok()) return exec.status();
    for (int it = 0; it < 3; ++it) {
      auto s = (*exec)->RunIteration(it);
      if (!s.ok()) return s.status();
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace zpipe::worker

namespace zpipe::worker {
namespace {

// Width of the activation entering stage k (k = S: the last stage's output): every boundary has
// another width, as in a model whose blocks change width (64 -> 96 -> 48).
int64_t Width(int k) { return 8 + 4 * k; }

// What the fake stages below share: their numbering, no parameters, a loss of 1, and the count
// of microbatches between F and W.
class FakeStage : public model::Stage {
 public:
  FakeStage(int stage, int num_stages) : stage_(stage), num_stages_(num_stages) {}
  int stage() const override { return stage_; }
  int num_stages() const override { return num_stages_; }
  absl::Status BackwardWeight(int) override {
    --pending_;
    return absl::OkStatus();
  }
  absl::StatusOr<float> Loss(int) const override { return 1.0f; }
  void ClearLosses() override {}
  void FreeMicrobatch(int) override { pending_ = 0; }
  int pending_microbatches() const override { return pending_; }
  const std::vector<model::ParamInfo>& params() const override { return params_; }

 protected:
  const int stage_, num_stages_;
  int pending_ = 0;

 private:
  std::vector<model::ParamInfo> params_;
};

// Stage s of a model whose boundaries all differ: F takes [b, Width(s)] and returns
// [b, Width(s+1)] filled with 1000 s + mb; B takes the gradient of its output and returns
// [b, Width(s)]. Inputs and output gradients are checked on arrival. `bad_output`: F returns one
// column too many (a block whose output shape depends on the data).
class WidthStage final : public FakeStage {
 public:
  WidthStage(int stage, int num_stages, bool bad_output = false)
      : FakeStage(stage, num_stages), bad_output_(bad_output) {}
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor& input,
                                        const torch::Tensor*) override {
    if (stage_ > 0) {
      if (absl::Status st = Expect("input", input, InputSpec(kB), Fill(stage_ - 1, mb)); !st.ok()) {
        return st;
      }
    }
    ++pending_;
    if (is_last()) return torch::full({}, 1.0f);
    return torch::full({kB, Width(stage_ + 1) + (bad_output_ ? 1 : 0)}, Fill(stage_, mb));
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int mb, const torch::Tensor& grad) override {
    if (!is_last()) {
      if (absl::Status st = Expect("output gradient", grad, OutputSpec(kB), -Fill(stage_ + 1, mb));
          !st.ok()) {
        return st;
      }
    }
    if (is_first()) return torch::Tensor();
    return torch::full({kB, Width(stage_)}, -Fill(stage_, mb));
  }
  model::TensorSpec InputSpec(int b) const override {
    return {{b, Width(stage_)}, torch::kFloat32};
  }
  model::TensorSpec OutputSpec(int b) const override {
    return {{b, Width(stage_ + 1)}, torch::kFloat32};
  }

  static constexpr int kB = 2;

 private:
  static float Fill(int stage, int mb) { return 1000.0f * stage + mb % 1000; }
  absl::Status Expect(const char* what, const torch::Tensor& t, const model::TensorSpec& spec,
                      float value) const {
    if (!t.defined() || t.sizes() != c10::IntArrayRef(spec.shape) ||
        !torch::equal(t, torch::full(spec.shape, value))) {
      return absl::InternalError(absl::StrCat("stage ", stage_, ": unexpected ", what));
    }
    return absl::OkStatus();
  }

  bool bad_output_;
};

// Runs two iterations and an evaluation of `kind` at p ranks over WidthStages; `bad_stage` (if
// >= 0) returns outputs of the wrong shape. Returns every rank's status.
std::vector<absl::Status> RunWidths(core::ScheduleKind kind, int p, int bad_stage = -1) {
  auto plan = testing::LoweredPlan(kind, p, 4);
  if (!plan.ok()) return {plan.status()};
  auto store = NewInMemoryStore();
  std::vector<absl::Status> errors(p);
  // Every rank's own status is kept in `errors`; the lowest one RunOnThreads returns is not needed.
  (void)testing::RunOnThreads(p, [&](int rank) -> absl::Status {
    errors[rank] = [&]() -> absl::Status {
      CommunicatorOptions o;
      o.pipeline_rank = rank;
      o.pipeline_size = p;
      o.key_prefix = absl::StrCat("widths/", core::ScheduleName(kind), "/");
      auto comm = NewTcpCommunicator(o, *store);
      if (!comm.ok()) return comm.status();
      std::vector<std::unique_ptr<model::Stage>> stages;
      for (int c = 0; c < plan->placement.chunks_per_rank(); ++c) {
        const int s = plan->placement.StageOf(rank, c);
        stages.push_back(std::make_unique<WidthStage>(s, plan->num_stages(), s == bad_stage));
      }
      ExecutorConfig config;
      config.microbatch_size = WidthStage::kB;
      config.optimizer = Optimizer::kSgd;
      config.max_grad_norm = 0;
      config.timeout = absl::Seconds(20);
      auto exec = Executor::Make(*plan, rank, 0, config, std::move(stages), **comm, nullptr,
                                 nullptr, nullptr);
      if (!exec.ok()) return exec.status();
      for (int it = 0; it < 2; ++it) {
        auto s = (*exec)->RunIteration(it);
        if (!s.ok()) return s.status();
      }
      auto eval = (*exec)->Evaluate(2, [](int) { return model::TokenBatch{}; });
      return eval.status();
    }();
    return absl::OkStatus();
  });
  return errors;
}

// Every receive is sized from the boundary it crosses (the producer's output, the consumer's
// input), not from the receiving stage's other boundary: with widths changing at every cut, every
// schedule and chunk count trains and evaluates, V turn-arounds and interleaved chunks included.
TEST(ExecutorTest, BoundariesOfDifferentWidthsOnEverySchedule) {
  const std::vector<std::pair<core::ScheduleKind, int>> cases = {
      {core::ScheduleKind::kZbV, 2},  {core::ScheduleKind::kInterleaved1F1B, 2},
      {core::ScheduleKind::k1F1B, 4}, {core::ScheduleKind::kZb2p, 2},
      {core::ScheduleKind::kZbV, 4},
  };
  for (const auto& [kind, p] : cases) {
    for (const absl::Status& st : RunWidths(kind, p)) {
      EXPECT_TRUE(st.ok()) << core::ScheduleName(kind) << " p=" << p << ": " << st;
    }
  }
}

// An output whose shape is not the one found at job start fails the job on the producing rank,
// naming the stage, the tensor and both shapes, before anything is sent.
TEST(ExecutorTest, AnOutputOfAnotherShapeFailsNamingBothShapes) {
  std::vector<absl::Status> st = RunWidths(core::ScheduleKind::kZbV, 2, /*bad_stage=*/1);
  ASSERT_EQ(st.size(), 2u);
  ASSERT_FALSE(st[1].ok());  // ZB-V p=2: stage 1 is on rank 1
  const std::string msg(st[1].message());
  EXPECT_EQ(st[1].code(), absl::StatusCode::kInvalidArgument) << st[1];
  EXPECT_NE(msg.find("stage 1 microbatch 0: its output activation is [2, 17] Float"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("found to be [2, 16] Float"), std::string::npos) << msg;
  EXPECT_FALSE(st[0].ok());  // its peer went away: an error, not a hang
}

// Stage s of a two-stage model on one rank whose F draws like dropout: torch::rand from the CPU
// generator, recorded per (stage, microbatch) in iteration order. Width 4 at every boundary.
class DrawStage final : public FakeStage {
 public:
  using Draws = std::map<std::pair<int, int>, std::vector<torch::Tensor>>;
  DrawStage(int stage, int num_stages, Draws* draws)
      : FakeStage(stage, num_stages), draws_(draws) {}
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor&,
                                        const torch::Tensor*) override {
    (*draws_)[{stage_, mb}].push_back(torch::rand({kWidth}));
    ++pending_;
    if (is_last()) return torch::full({}, 1.0f);
    return torch::zeros({WidthStage::kB, kWidth});
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int, const torch::Tensor&) override {
    if (is_first()) return torch::Tensor();
    return torch::zeros({WidthStage::kB, kWidth});
  }
  model::TensorSpec InputSpec(int b) const override { return {{b, kWidth}, torch::kFloat32}; }
  model::TensorSpec OutputSpec(int b) const override { return {{b, kWidth}, torch::kFloat32}; }

 private:
  static constexpr int kWidth = 4;
  Draws* draws_;
};

// Two iterations of `kind` at p = 1, m = 4 (two stages on the one rank) over DrawStages.
absl::StatusOr<DrawStage::Draws> RunDraws(core::ScheduleKind kind,
                                          std::optional<uint64_t> forward_seed) {
  auto plan = testing::LoweredPlan(kind, 1, 4);
  if (!plan.ok()) return plan.status();
  auto store = NewInMemoryStore();
  CommunicatorOptions o;
  o.pipeline_rank = 0;
  o.pipeline_size = 1;
  o.key_prefix = absl::StrCat("draws/", core::ScheduleName(kind), "/");
  auto comm = NewTcpCommunicator(o, *store);
  if (!comm.ok()) return comm.status();
  DrawStage::Draws draws;
  std::vector<std::unique_ptr<model::Stage>> stages;
  for (int c = 0; c < plan->placement.chunks_per_rank(); ++c) {
    stages.push_back(
        std::make_unique<DrawStage>(plan->placement.StageOf(0, c), plan->num_stages(), &draws));
  }
  ExecutorConfig config;
  config.microbatch_size = WidthStage::kB;
  config.optimizer = Optimizer::kSgd;
  config.max_grad_norm = 0;
  config.forward_seed = forward_seed;
  auto exec = Executor::Make(*plan, 0, 0, config, std::move(stages), **comm, nullptr, nullptr,
                             nullptr);
  if (!exec.ok()) return exec.status();
  for (int it = 0; it < 2; ++it) {
    if (auto s = (*exec)->RunIteration(it); !s.ok()) return s.status();
  }
  return draws;
}

// With the job's seed every F draws from ForwardSeed(seed, iteration, data rank, stage,
// microbatch): the same masks whatever order the schedule runs its forwards in (ZB-V, V-Half and
// interleaved order the two stages' Fs differently) and whatever drew before; without it a
// forward draws on from wherever the generator stands.
TEST(ExecutorTest, TheJobSeedFixesEveryForwardsDrawsWhateverTheSchedule) {
  std::map<core::ScheduleKind, DrawStage::Draws> seeded;
  for (core::ScheduleKind kind : {core::ScheduleKind::kZbV, core::ScheduleKind::kVHalf,
                                  core::ScheduleKind::kInterleaved1F1B}) {
    (void)torch::rand({7});  // whatever drew before
    auto draws = RunDraws(kind, 11);
    ASSERT_TRUE(draws.ok()) << draws.status();
    seeded[kind] = *std::move(draws);
  }
  const DrawStage::Draws& zbv = seeded[core::ScheduleKind::kZbV];
  ASSERT_EQ(zbv.size(), 8u);  // 2 stages x 4 microbatches
  for (const auto& [key, per_iteration] : zbv) {
    const auto [stage, mb] = key;
    ASSERT_EQ(per_iteration.size(), 2u);
    for (int it = 0; it < 2; ++it) {
      at::Generator gen = at::detail::createCPUGenerator(model::ForwardSeed(11, it, 0, stage, mb));
      EXPECT_TRUE(torch::equal(per_iteration[it], torch::rand({4}, gen)))
          << "stage " << stage << " mb " << mb << " iteration " << it;
    }
    EXPECT_FALSE(torch::equal(per_iteration[0], per_iteration[1]));  // iterations draw anew
    for (const auto& [kind, draws] : seeded) {
      for (int it = 0; it < 2; ++it) {
        EXPECT_TRUE(torch::equal(draws.at(key)[it], per_iteration[it]))
            << core::ScheduleName(kind) << " stage " << stage << " mb " << mb;
      }
    }
  }
  EXPECT_FALSE(torch::equal(zbv.at({0, 0})[0], zbv.at({0, 1})[0]));  // microbatches apart
  EXPECT_FALSE(torch::equal(zbv.at({0, 0})[0], zbv.at({1, 0})[0]));  // stages apart
  EXPECT_NE(model::ForwardSeed(11, 0, 0, 0, 0), model::ForwardSeed(11, 0, 1, 0, 0));
  // python/tests/test_zeropipe.py asserts the same value (zeropipe.forward_seed), so a plain
  // PyTorch loop can draw a run's masks.
  EXPECT_EQ(model::ForwardSeed(1, 2, 3, 4, 5), 0x5411837E6A4E571DULL);
  EXPECT_NE(model::ForwardSeed(11, 0, 0, 0, 0), model::ForwardSeed(12, 0, 0, 0, 0));

  auto unseeded = RunDraws(core::ScheduleKind::kZbV, std::nullopt);
  auto again = RunDraws(core::ScheduleKind::kZbV, std::nullopt);
  ASSERT_TRUE(unseeded.ok() && again.ok());
  EXPECT_FALSE(torch::equal(unseeded->at({0, 0})[0], again->at({0, 0})[0]));
}

}  // namespace
}  // namespace zpipe::worker
