// Grad sync over real TCP communicators: every (pipeline rank, DP replica) is a thread over one
// InMemoryStore, running a ZB-V plan (p = 2, d = 2) with an executor stand-in that accumulates
// known values and reports each contribution as it is issued.
#include "worker/grad_sync/grad_sync.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/grad_sync.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/model/param_info.h"

namespace zpipe::worker {
namespace {

using core::ActionKind;
using model::GradPhase;
using model::ParamInfo;
using Clock = std::chrono::steady_clock;

constexpr int kP = 2;
constexpr int kD = 2;
constexpr int kM = 4;
constexpr int64_t kBucketBytes = 400 * sizeof(float);

// Three layers per stage: split-linear weights (W), biases and a LayerNorm (B), and one weight
// used twice per microbatch. With 400-float buckets that packs into three buckets per stage:
// {L2.ln, L2.b, L2.w, L1.b}, {L1.w, L0.b}, {L0.w}.
ParamInfo Param(std::string name, int64_t numel, int layer, GradPhase phase, int uses = 1) {
  ParamInfo p;
  p.name = std::move(name);
  p.tensor = torch::zeros({numel});
  p.phase = phase;
  p.accumulations_per_microbatch = uses;
  p.layer = layer;
  return p;
}

std::vector<ParamInfo> StageParams() {
  return {
      Param("L0.w", 300, 0, GradPhase::kW),    Param("L0.b", 40, 0, GradPhase::kB),
      Param("L1.w", 300, 1, GradPhase::kW, 2), Param("L1.b", 40, 1, GradPhase::kB),
      Param("L2.w", 300, 2, GradPhase::kW),    Param("L2.b", 40, 2, GradPhase::kB),
      Param("L2.ln", 20, 2, GradPhase::kB),
  };
}

core::Plan MakePlan(core::ScheduleKind kind) {
  core::ScheduleRequest req;
  req.pipeline = kP;
  req.microbatches = kM;
  const core::Placement pl = core::PlacementFor(kind, kP);
  req.cost = core::CostModel::Uniform(pl.num_stages(), core::StageCost{});
  auto plan = core::GenerateSchedule(kind, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  auto lowered = core::LowerComm(*plan);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  return *lowered;
}

void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

std::unique_ptr<Communicator> Connect(int pr, int dr, KeyValueStore& store,
                                      absl::Duration timeout = absl::Seconds(20)) {
  CommunicatorOptions o;
  o.pipeline_rank = pr;
  o.pipeline_size = kP;
  o.data_rank = dr;
  o.data_size = kD;
  o.key_prefix = "gs/";
  o.timeout = timeout;
  auto comm = NewTcpCommunicator(o, store);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

// One DP replica of one pipeline rank: owns real parameter tensors whose .grad are bucket views.
struct Replica {
  int pr = 0, dr = 0;
  core::Plan plan;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradSync> sync;
  std::vector<std::vector<torch::Tensor>> params;      // [chunk][param]
  std::vector<std::vector<torch::Tensor>> reference;   // [chunk][param]: unscaled sums
  std::vector<std::pair<int, int>> observed_launches;  // (stage, bucket) as seen after each call
  std::vector<std::string> call_errors;

  absl::Status Init(const GradSyncOptions& options) {
    const core::Placement& pl = plan.placement;
    std::vector<std::vector<ParamInfo>> infos(pl.chunks_per_rank(), StageParams());
    auto gs = GradSync::Create(plan, pr, infos, options, *comm);
    if (!gs.ok()) return gs.status();
    sync = *std::move(gs);
    params.assign(pl.chunks_per_rank(), {});
    reference.assign(pl.chunks_per_rank(), {});
    for (int c = 0; c < pl.chunks_per_rank(); ++c) {
      for (const ParamInfo& info : StageParams()) {
        params[c].push_back(torch::zeros_like(info.tensor));
        reference[c].push_back(torch::zeros_like(info.tensor));
      }
      if (absl::Status s = sync->AttachGrads(pl.StageOf(pr, c), params[c]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  void NoteLaunches() {
    for (const BucketRecord& r : sync->records()) {
      const std::pair<int, int> key{r.stage, r.bucket};
      if (r.launches > 0 && std::find(observed_launches.begin(), observed_launches.end(), key) ==
                                observed_launches.end()) {
        observed_launches.push_back(key);
      }
    }
  }

  const BucketRecord& RecordOf(int stage, int param) const {
    for (const BucketRecord& r : sync->records()) {
      const BucketLayout& b = sync->buckets()[&r - &sync->records()[0]];
      if (b.stage != stage) continue;
      for (int p : b.params) {
        if (p == param) return r;
      }
    }
    ADD_FAILURE() << "no bucket for stage " << stage << " param " << param;
    return sync->records()[0];
  }

  // Runs one iteration of this rank's plan. `skip` (stage, param, occurrence) leaves out one
  // contribution; `reverse_within_action` issues an action's contributions in the opposite order
  // from the layout; `check_immediate` asserts the launch happens right at the last contribution.
  void RunIteration(bool check_immediate, bool reverse_within_action = false,
                    std::tuple<int, int, int> skip = {-1, -1, -1}) {
    observed_launches.clear();
    ASSERT_TRUE(sync->BeginIteration().ok());
    const core::Placement& pl = plan.placement;
    const std::vector<ParamInfo> infos = StageParams();
    std::map<std::pair<int, int>, int> seen;  // (stage, param) -> contributions issued
    for (const core::Action& a : plan.ranks[pr]) {
      if (!core::IsCompute(a.kind) || a.kind == ActionKind::kForward) continue;
      const int c = pl.ChunkOf(a.stage);
      // Layout (packing) order: bucket by bucket, each in reverse layer order.
      std::vector<std::pair<int, int>> by_bucket;
      for (const BucketLayout& b : sync->buckets()) {
        if (b.stage != a.stage) continue;
        for (int p : b.params) by_bucket.push_back({b.index, p});
      }
      std::stable_sort(by_bucket.begin(), by_bucket.end(),
                       [](auto x, auto y) { return x.first < y.first; });
      std::vector<int> order;
      for (auto [bucket, p] : by_bucket) order.push_back(p);
      if (reverse_within_action) std::reverse(order.begin(), order.end());
      for (int p : order) {
        const int uses = model::Accumulations(infos[p], a.kind);
        for (int u = 0; u < uses; ++u) {
          const int occurrence = seen[{a.stage, p}]++;
          if (skip == std::make_tuple(a.stage, p, occurrence)) continue;
          const float value = static_cast<float>((a.microbatch + 1) * (a.stage + 1) * (p + 1));
          params[c][p].mutable_grad().add_(value * (dr + 1));
          reference[c][p].add_(value);
          absl::Status s = sync->OnContribution(a.stage, p);
          if (!s.ok()) call_errors.push_back(std::string(s.message()));
          NoteLaunches();
          if (check_immediate) {
            const BucketRecord& r = RecordOf(a.stage, p);
            EXPECT_EQ(r.launches, r.received == r.expected ? 1 : 0)
                << "stage " << a.stage << " bucket " << r.bucket << " after " << r.received
                << " of " << r.expected;
          }
        }
      }
    }
  }

  // After a successful FinishIteration every gradient is the DP average: mean(dr + 1) = 1.5.
  void ExpectAveraged() const {
    for (size_t c = 0; c < params.size(); ++c) {
      for (size_t p = 0; p < params[c].size(); ++p) {
        EXPECT_TRUE(
            torch::allclose(params[c][p].grad(), reference[c][p] * ((kD + 1) / 2.0), 1e-5, 1e-5))
            << "rank " << pr << " replica " << dr << " chunk " << c << " param " << p;
      }
    }
  }
};

TEST(PackBucketsTest, ReverseLayerOrderWithinTheSizeCap) {
  const auto buckets = PackBuckets(3, StageParams(), kBucketBytes);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<int>{6, 5, 4, 3}));
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 20, 60, 360}));
  EXPECT_EQ(buckets[0].numel, 400);
  EXPECT_TRUE(buckets[0].grads_in_b && buckets[0].grads_in_w);
  EXPECT_EQ(buckets[1].params, (std::vector<int>{2, 1}));
  EXPECT_EQ(buckets[2].params, (std::vector<int>{0}));
  EXPECT_FALSE(buckets[2].grads_in_b);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(buckets[i].stage, 3);
    EXPECT_EQ(buckets[i].index, i);
  }
  // A parameter over the cap gets a bucket of its own; empty parameters are left out.
  const auto big = PackBuckets(
      0,
      {Param("a", 10, 0, GradPhase::kW), Param("huge", 1000, 1, GradPhase::kW),
       Param("none", 0, 2, GradPhase::kW)},
      kBucketBytes);
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].params, (std::vector<int>{1}));
  EXPECT_EQ(big[1].params, (std::vector<int>{0}));
}

// Expected counts: m x uses per parameter, counting B, W and BW.
TEST(GradSyncTest, ExpectedContributionsCountBAndWAndUses) {
  for (core::ScheduleKind kind : {core::ScheduleKind::kZbV, core::ScheduleKind::k1F1B}) {
    auto store = NewInMemoryStore();
    CommunicatorOptions o;  // p = d = 1: nothing to connect
    auto comm = NewTcpCommunicator(o, *store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    const core::Plan plan = MakePlan(kind);
    const int chunks = plan.placement.chunks_per_rank();
    auto gs = GradSync::Create(plan, 0, std::vector<std::vector<ParamInfo>>(chunks, StageParams()),
                               {.bucket_bytes = kBucketBytes}, **comm);
    ASSERT_TRUE(gs.ok()) << gs.status();
    ASSERT_EQ((*gs)->records().size(), 3u * chunks);
    for (const BucketRecord& r : (*gs)->records()) {
      const int per_mb = r.bucket == 0 ? 4 : r.bucket == 1 ? 3 : 1;  // see StageParams
      EXPECT_EQ(r.expected, kM * per_mb) << core::ScheduleName(kind) << " bucket " << r.bucket;
    }
  }
}

// Every parameter's gradient arrives in B or in W, so a bucket can only starve when the plan has
// no backward of its stage: it could never fire, and is refused when grad sync is made.
TEST(GradSyncTest, BucketWithoutAnyContributionIsRefused) {
  auto store = NewInMemoryStore();
  auto comm = NewTcpCommunicator(CommunicatorOptions{}, *store);
  ASSERT_TRUE(comm.ok());
  core::Plan plan = core::EmptyPlan("forward-only", core::Placement::Linear(1), 1);
  plan.ranks[0].push_back(core::Action::F(0, 0));
  auto gs = GradSync::Create(plan, 0, {{Param("w", 10, 0, GradPhase::kW)}}, {}, **comm);
  EXPECT_TRUE(absl::IsFailedPrecondition(gs.status())) << gs.status();
}

struct World {
  std::vector<std::unique_ptr<Replica>> replicas;  // index = dr * kP + pr
  Replica& at(int pr, int dr) { return *replicas[dr * kP + pr]; }
};

// Builds every replica (connect + GradSync) on its own thread, then runs `body` per replica.
void RunWorld(const core::Plan& plan, const GradSyncOptions& options,
              const std::function<void(Replica&)>& body, World* world,
              absl::Duration timeout = absl::Seconds(20)) {
  auto store = NewInMemoryStore();
  world->replicas.resize(kP * kD);
  RunRanks(kP * kD, [&](int global) {
    auto r = std::make_unique<Replica>();
    r->pr = global % kP;
    r->dr = global / kP;
    r->plan = plan;
    r->comm = Connect(r->pr, r->dr, *store, timeout);
    ASSERT_NE(r->comm, nullptr);
    ASSERT_TRUE(r->Init(options).ok());
    body(*r);
    world->replicas[global] = std::move(r);
  });
}

TEST(GradSyncTest, EveryBucketFiresExactlyOnceRightAfterItsLastContributionUnderZbV) {
  World world;
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes},
      [](Replica& r) {
        for (int iteration = 0; iteration < 2; ++iteration) {
          for (auto& chunk : r.reference) {
            for (auto& t : chunk) t.zero_();
          }
          r.RunIteration(/*check_immediate=*/true);
          EXPECT_TRUE(r.call_errors.empty());
          ASSERT_TRUE(r.sync->FinishIteration().ok());
          EXPECT_TRUE(r.sync->errors().empty());
          r.ExpectAveraged();
          for (const BucketRecord& b : r.sync->records()) {
            EXPECT_EQ(b.launches, 1);
            EXPECT_TRUE(b.finished);
            EXPECT_LE(b.ready_time, b.launch_time);
            EXPECT_LE(b.launch_time, b.start_time);
            EXPECT_LE(b.start_time, b.end_time);
          }
        }
      },
      &world);
  for (int pr = 0; pr < kP; ++pr) {
    Replica& a = world.at(pr, 0);
    Replica& b = world.at(pr, 1);
    EXPECT_EQ(a.observed_launches.size(), 6u);  // 2 chunks x 3 buckets
    EXPECT_EQ(a.observed_launches, b.observed_launches) << "pipeline rank " << pr;
    std::vector<std::pair<int, int>> planned;
    for (const BucketLayout& bl : a.sync->buckets()) planned.push_back({bl.stage, bl.index});
    EXPECT_EQ(a.observed_launches, planned);
  }
}

// Replica 1 issues each action's contributions in the opposite order: buckets reach zero in a
// different order there, yet both replicas launch in the plan's order and the averages hold.
TEST(GradSyncTest, LaunchOrderFollowsThePlanEvenWhenZeroCrossingsDiffer) {
  World world;
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes},
      [](Replica& r) {
        r.RunIteration(/*check_immediate=*/false, /*reverse_within_action=*/r.dr == 1);
        ASSERT_TRUE(r.sync->FinishIteration().ok());
        r.ExpectAveraged();
      },
      &world);
  for (int pr = 0; pr < kP; ++pr) {
    EXPECT_EQ(world.at(pr, 0).observed_launches, world.at(pr, 1).observed_launches);
  }
}

TEST(GradSyncTest, ExtraContributionIsReportedNamingTheBucket) {
  World world;
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes},
      [](Replica& r) {
        r.RunIteration(/*check_immediate=*/true);
        const int stage = r.plan.placement.StageOf(r.pr, 1);
        // Plant: one more accumulation into L1.w (bucket 1) after it already fired.
        absl::Status s = r.sync->OnContribution(stage, 2);
        EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
        EXPECT_NE(s.message().find(absl::StrCat("stage ", stage, " bucket 1")), std::string::npos)
            << s;
        EXPECT_NE(s.message().find("extra"), std::string::npos) << s;
        absl::Status end = r.sync->FinishIteration();
        EXPECT_TRUE(absl::IsFailedPrecondition(end)) << end;
        EXPECT_NE(end.message().find(absl::StrCat("stage ", stage, " bucket 1")),
                  std::string::npos);
        ASSERT_EQ(r.sync->errors().size(), 1u);
        for (const BucketRecord& b : r.sync->records()) EXPECT_EQ(b.launches, 1);
      },
      &world);
}

TEST(GradSyncTest, MissingContributionIsReportedAsNeverFired) {
  World world;
  const auto start = Clock::now();
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes},
      [](Replica& r) {
        // Both replicas lose the last accumulation of L0.w (bucket 2) of their chunk 0.
        const int stage = r.plan.placement.StageOf(r.pr, 0);
        r.RunIteration(/*check_immediate=*/false, false, {stage, 0, kM - 1});
        absl::Status end = r.sync->FinishIteration();
        EXPECT_TRUE(absl::IsFailedPrecondition(end)) << end;
        EXPECT_NE(end.message().find(absl::StrCat("stage ", stage,
                                                  " bucket 2 (chunk 0) never "
                                                  "fired: received 3 of 4")),
                  std::string::npos)
            << end;
      },
      &world);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
}

// Only one replica loses a contribution: it reports "never fired"; its partner's all-reduce
// fails within the communicator timeout instead of hanging.
TEST(GradSyncTest, OneSidedMissingContributionFailsBothReplicasWithoutHanging) {
  World world;
  const auto start = Clock::now();
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes},
      [](Replica& r) {
        const int stage = r.plan.placement.StageOf(r.pr, 0);
        std::tuple<int, int, int> skip{-1, -1, -1};
        if (r.dr == 1) skip = {stage, 0, kM - 1};
        r.RunIteration(/*check_immediate=*/false, false, skip);
        absl::Status end = r.sync->FinishIteration();
        EXPECT_FALSE(end.ok());
        if (r.dr == 1) {
          EXPECT_NE(end.message().find("never fired"), std::string::npos) << end;
          r.comm.reset();  // the failed replica leaves the job
        }
      },
      &world, absl::Seconds(1));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
}

TEST(GradSyncTest, OverlapOffReducesEverythingAfterTheLastAction) {
  World world;
  RunWorld(
      MakePlan(core::ScheduleKind::kZbV), {.bucket_bytes = kBucketBytes, .overlap = false},
      [](Replica& r) {
        r.RunIteration(/*check_immediate=*/false);
        EXPECT_TRUE(r.observed_launches.empty());
        const auto last_action_done = Clock::now();
        ASSERT_TRUE(r.sync->FinishIteration().ok());
        r.ExpectAveraged();
        for (const BucketRecord& b : r.sync->records()) {
          EXPECT_EQ(b.launches, 1);
          EXPECT_GE(b.launch_time, last_action_done);
        }
      },
      &world);
}

// OnActionDone counts what a whole action contributes, for executors without per-parameter
// tracking; it reaches the same counts.
TEST(GradSyncTest, OnActionDoneMatchesPerParameterCounting) {
  auto store = NewInMemoryStore();
  auto comm = NewTcpCommunicator(CommunicatorOptions{}, *store);
  ASSERT_TRUE(comm.ok());
  for (core::ScheduleKind kind : {core::ScheduleKind::kZbV, core::ScheduleKind::k1F1B}) {
    const core::Plan plan = MakePlan(kind);
    const int chunks = plan.placement.chunks_per_rank();
    for (int rank = 0; rank < kP; ++rank) {
      auto gs =
          GradSync::Create(plan, rank, std::vector<std::vector<ParamInfo>>(chunks, StageParams()),
                           {.bucket_bytes = kBucketBytes}, **comm);
      ASSERT_TRUE(gs.ok()) << gs.status();
      ASSERT_TRUE((*gs)->BeginIteration().ok());
      for (const core::Action& a : plan.ranks[rank]) {
        ASSERT_TRUE((*gs)->OnActionDone(a).ok()) << core::ActionToString(a);
      }
      ASSERT_TRUE((*gs)->FinishIteration().ok()) << core::ScheduleName(kind);
      // One more W/BW is extra and is reported.
      ASSERT_TRUE((*gs)->BeginIteration().ok());
      for (const core::Action& a : plan.ranks[rank]) ASSERT_TRUE((*gs)->OnActionDone(a).ok());
      const core::Action extra = kind == core::ScheduleKind::kZbV
                                     ? core::Action::W(plan.placement.StageOf(rank, 0), 0)
                                     : core::Action::BW(plan.placement.StageOf(rank, 0), 0);
      EXPECT_TRUE(absl::IsFailedPrecondition((*gs)->OnActionDone(extra)));
      EXPECT_FALSE((*gs)->FinishIteration().ok());
    }
  }
}

// The executor checks every REDUCE action of a plan made with the same layout: by then the
// bucket has fired. Earlier it has not, and a foreign bucket is refused.
TEST(GradSyncTest, ExpectLaunchedAgreesWithThePlansReduceActions) {
  auto store = NewInMemoryStore();
  auto comm = NewTcpCommunicator(CommunicatorOptions{}, *store);
  ASSERT_TRUE(comm.ok());
  const core::Plan plan = MakePlan(core::ScheduleKind::kZbV);
  const core::Placement& pl = plan.placement;
  for (int rank = 0; rank < kP; ++rank) {
    auto gs = GradSync::Create(plan, rank, {StageParams(), StageParams()},
                               {.bucket_bytes = kBucketBytes}, **comm);
    ASSERT_TRUE(gs.ok()) << gs.status();
    core::GradSyncLayout layout;
    layout.buckets.resize(pl.num_stages());
    for (int c = 0; c < 2; ++c) {
      for (const BucketLayout& b : PackBuckets(pl.StageOf(rank, c), StageParams(), kBucketBytes)) {
        layout.buckets[b.stage].push_back({b.grads_in_b, b.grads_in_w, 1});
      }
    }
    auto with_reduce = core::PlanGradSync(plan, layout);
    ASSERT_TRUE(with_reduce.ok()) << with_reduce.status();
    ASSERT_TRUE((*gs)->BeginIteration().ok());
    EXPECT_TRUE(absl::IsFailedPrecondition((*gs)->ExpectLaunched(0, 0)));
    EXPECT_TRUE(absl::IsInvalidArgument((*gs)->ExpectLaunched(0, 7)));
    int reduces = 0;
    for (const core::Action& a : with_reduce->plan.ranks[rank]) {
      if (a.kind == ActionKind::kReduce) {
        ++reduces;
        EXPECT_TRUE((*gs)->ExpectLaunched(a.chunk, a.bucket).ok()) << core::ActionToString(a);
      } else {
        ASSERT_TRUE((*gs)->OnActionDone(a).ok());
      }
    }
    EXPECT_EQ(reduces, 6);
    EXPECT_FALSE((*gs)->FinishIteration().ok());  // the early ExpectLaunched was recorded
    EXPECT_EQ((*gs)->errors().size(), 1u);
  }
}

// The model's parameter list is grad sync's: phase and size come from it as they are, and the
// embeddings (layer -1) pack last, in reverse layer order.
TEST(PackBucketsTest, TakesTheModelsParameters) {
  std::vector<ParamInfo> params(2);
  params[0].name = "embed.weight";
  params[0].tensor = torch::zeros({3, 4});
  params[0].phase = GradPhase::kB;
  params[0].accumulations_per_microbatch = 2;
  params[0].layer = -1;
  params[1].name = "layers.0.fc1.weight";
  params[1].tensor = torch::zeros({5});
  params[1].phase = GradPhase::kW;
  params[1].layer = 0;
  EXPECT_EQ(model::ParamTensors(params)[1].numel(), 5);
  const auto buckets = PackBuckets(0, params, 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(buckets[0].numel, 17);
  EXPECT_TRUE(buckets[0].grads_in_b && buckets[0].grads_in_w);
}

}  // namespace
}  // namespace zpipe::worker
