// Tests of the V-shape schedules (ZB-V, V-Half, V-Min, DualPipeV): published bubble rates, the
// closed form, memory bounds, and properties over random shapes and costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/lowering.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

constexpr ScheduleKind kVKinds[] = {ScheduleKind::kZbV, ScheduleKind::kVHalf, ScheduleKind::kVMin,
                                    ScheduleKind::kDualPipeV};

// Uniform per-chunk costs; memory as in the ZB paper's shape: F holds 1, B frees a half, W the
// rest.
CostModel VCost(int p, double f, double b, double w, double comm) {
  return CostModel::Uniform(
      2 * p, StageCost{.f = f, .b = b, .w = w, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5}, comm);
}

ScheduleRequest Request(int p, int m, CostModel cost) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = std::move(cost);
  return req;
}

double MaxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// Both bubble measures, from the timings (so independent of which one core::Simulate reports):
// docs/design.md's (and the papers'), with each rank's span from its own first action to its last,
// and the global one, from the first action of any rank to the last end of any.
struct Bubbles {
  double per_rank = 0;
  double global = 0;
};

Bubbles MeasureBubbles(const SimResult& sim) {
  double rank_span = 0, lo_all = 1e300, hi_all = 0, busy = 0;
  for (size_t r = 0; r < sim.timings.size(); ++r) {
    double lo = 1e300, hi = 0;
    for (const ActionTiming& t : sim.timings[r]) {
      lo = std::min(lo, t.start);
      hi = std::max(hi, t.end);
    }
    rank_span = std::max(rank_span, hi - lo);
    lo_all = std::min(lo_all, lo);
    hi_all = std::max(hi_all, hi);
    busy += sim.busy[r];
  }
  const double p = sim.timings.size();
  return {1 - busy / (p * rank_span), 1 - busy / (p * (hi_all - lo_all))};
}

struct Published {
  int p, m;
  double f, b, w, comm;
  double bubble;  // ZB paper, Table 8
  double ours;    // what this generator reaches today, per-rank measure (regression bound)
};
// The table's times read as per chunk (each of the 2p stages).
constexpr Published kZbVTable8[] = {
    {16, 48, 14407, 14380, 9676, 1610, .0697, .0697},
    {32, 96, 9458, 9748, 7288, 879, .0593, .0574},
};

absl::StatusOr<SimResult> GenerateAndSimulate(ScheduleKind kind, const ScheduleRequest& req,
                                              Plan* plan_out = nullptr) {
  auto plan = GenerateSchedule(kind, req);
  if (!plan.ok()) return plan.status();
  if (plan_out) *plan_out = *plan;
  return Simulate(*plan, req.cost);
}

// Issue 2's acceptance: within 0.002 of the ZB paper's Table 8 or lower, at 2p chunk
// activations (1F1B's memory), in docs/design.md's per-rank measure.
TEST(ZbVTest, PublishedBubbleRates) {
  for (const Published& row : kZbVTable8) {
    ScheduleRequest req = Request(row.p, row.m, VCost(row.p, row.f, row.b, row.w, row.comm));
    auto sim = GenerateAndSimulate(ScheduleKind::kZbV, req);
    ASSERT_TRUE(sim.ok()) << sim.status();
    const Bubbles bubbles = MeasureBubbles(*sim);
    std::printf("zb-v p=%d m=%d: ours %.4f (global span %.4f), published %.4f, peak %.1f of %d\n",
                row.p, row.m, bubbles.per_rank, bubbles.global, row.bubble, MaxOf(sim->peak_memory),
                2 * row.p);
    EXPECT_LE(MaxOf(sim->peak_memory), 2 * row.p);
    EXPECT_LE(bubbles.per_rank, row.bubble + 0.002) << "p=" << row.p;
    EXPECT_LE(bubbles.per_rank, row.ours + 1e-4) << "p=" << row.p;  // no regression
  }
}

// A lower bound at the 2p-chunk limit for the global measure (first start of any rank to last
// end of any) with uniform costs and equal mem_f: rank p-1 cannot start before the forward
// reaches it, (p-1)(T_F + T_comm), and cannot start its first backward before
// 2p T_F + (p-1) T_B + (3p-3) T_comm; until then it can only run forwards, at most 2p of them
// (each holds memory that only B and W free). So it idles at least (p-1)(T_B + 3 T_comm) and,
// all ranks having the same work, bubble >= idle / (work + idle). The ZB paper's Table 8 values
// lie below this bound, so they can only be per-rank figures, where rank p-1's late start does
// not count.
TEST(ZbVTest, NotBelowTheMemoryBound) {
  for (const Published& row : kZbVTable8) {
    ScheduleRequest req = Request(row.p, row.m, VCost(row.p, row.f, row.b, row.w, row.comm));
    auto sim = GenerateAndSimulate(ScheduleKind::kZbV, req);
    ASSERT_TRUE(sim.ok()) << sim.status();
    const double idle = (row.p - 1) * (row.b + 3 * row.comm);
    const double work = 2.0 * row.m * (row.f + row.b + row.w);
    const double bound = idle / (work + idle);
    const double global = MeasureBubbles(*sim).global;
    std::printf("zb-v p=%d m=%d: global-measure bound %.4f, ours %.4f, published %.4f\n", row.p,
                row.m, bound, global, row.bubble);
    EXPECT_GE(global, bound - 1e-12);
    EXPECT_GT(bound, row.bubble);
  }
}

// Equal F, B, W and no comm: every rank computes without a gap from its first action to its
// last (bubble 0 in docs/design.md's per-rank measure); from the first action anywhere to the last,
// the iteration takes the work of one rank plus the (p-1) T_F the forward needs to reach rank
// p-1.
TEST(ZbVTest, ClosedFormZeroBubble) {
  for (int p = 2; p <= 8; ++p) {
    for (int m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 3}) {
      const double t = 2.5;
      ScheduleRequest req = Request(p, m, VCost(p, t, t, t, 0));
      auto sim = GenerateAndSimulate(ScheduleKind::kZbV, req);
      ASSERT_TRUE(sim.ok()) << sim.status();
      const Bubbles bubbles = MeasureBubbles(*sim);
      EXPECT_NEAR(bubbles.per_rank, 0, 1e-9) << "p=" << p << " m=" << m;
      const double work = 6 * m * t;
      EXPECT_NEAR(bubbles.global, 1 - work / (work + (p - 1) * t), 1e-9) << "p=" << p;
      EXPECT_LE(MaxOf(sim->peak_memory), 2 * p + 1e-9);
    }
  }
}

TEST(VShapeTest, MemoryAndBubbleOfVHalfAndVMin) {
  struct Row {
    int p, m;
    double f, b, w, comm;
  };
  const Row rows[] = {{8, 24, 1, 1, 1, 0},
                      {16, 48, 1, 1, 1, 0},
                      {32, 96, 1, 1, 1, 0},
                      {16, 48, 14407, 14380, 9676, 1610},
                      {32, 96, 9458, 9748, 7288, 879}};
  for (const Row& row : rows) {
    const int p = row.p;
    ScheduleRequest req = Request(p, row.m, VCost(p, row.f, row.b, row.w, row.comm));
    // 1F1B keeps p full-stage activations on rank 0: 2p chunks.
    const double one_f_one_b = 2.0 * p;
    std::printf("p=%d m=%d costs %g/%g/%g/%g:", p, row.m, row.f, row.b, row.w, row.comm);
    for (ScheduleKind kind : kVKinds) {
      auto sim = GenerateAndSimulate(kind, req);
      ASSERT_TRUE(sim.ok()) << ScheduleName(kind) << ": " << sim.status();
      const double peak = MaxOf(sim->peak_memory);
      std::printf("  %s bubble %.4f peak %.1f (%.0f%%)", std::string(ScheduleName(kind)).c_str(),
                  MeasureBubbles(*sim).per_rank, peak, 100 * peak / one_f_one_b);
      switch (kind) {
        case ScheduleKind::kVHalf:  // about a half: p + 2 chunks
          EXPECT_LE(peak, p + 2 + 1e-9);
          break;
        case ScheduleKind::kVMin:  // about a third: ceil(2p / 3) + 2 chunks
          EXPECT_LE(peak, std::ceil(2.0 * p / 3) + 2 + 1e-9);
          break;
        default:
          EXPECT_LE(peak, one_f_one_b + 1e-9);
      }
    }
    std::printf("\n");
  }
}

TEST(VShapeTest, RejectsWhatItCannotSchedule) {
  ScheduleRequest req = Request(4, 7, VCost(4, 1, 1, 1, 0));
  auto dpv = GenerateSchedule(ScheduleKind::kDualPipeV, req);
  EXPECT_EQ(dpv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dpv.status().message().find("microbatches >= 2 * pipeline"), std::string::npos)
      << dpv.status();
  req.memory_limit = 1.5;  // below one microbatch's two chunks
  for (ScheduleKind kind : {ScheduleKind::kZbV, ScheduleKind::kVHalf, ScheduleKind::kVMin}) {
    auto plan = GenerateSchedule(kind, req);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << ScheduleName(kind);
    EXPECT_NE(plan.status().message().find("memory limit"), std::string::npos) << plan.status();
  }
  req.microbatches = 8;
  req.memory_limit = 7;  // DualPipeV needs its 2p = 8 warm-up chunks
  auto low = GenerateSchedule(ScheduleKind::kDualPipeV, req);
  EXPECT_EQ(low.status().code(), absl::StatusCode::kFailedPrecondition) << low.status();
}

// Random per-stage costs, every p in 2..16 and a spread of m in 1..64: each plan validates with
// its memory limit, lowers, and the lowered plan simulates (in order, no deadlock) to the same
// makespan.
TEST(VShapeTest, PropertiesOverRandomShapes) {
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<double> time(0.2, 3.0), mem(0.5, 2.0), wshare(0.1, 0.9);
  int plans = 0;
  for (int p = 2; p <= 16; ++p) {
    std::vector<int> ms = {1, 2, 2 * p - 1, 2 * p, 64};
    for (int k = 0; k < 2; ++k) ms.push_back(std::uniform_int_distribution<int>(1, 64)(rng));
    for (int m : ms) {
      CostModel cost;
      cost.comm = std::uniform_real_distribution<double>(0, 0.5)(rng);
      for (int s = 0; s < 2 * p; ++s) {
        StageCost c;
        c.f = time(rng);
        c.b = time(rng);
        c.w = time(rng);
        c.mem_f = mem(rng);
        c.mem_w = -c.mem_f * wshare(rng);
        c.mem_b = -c.mem_f - c.mem_w;
        cost.stages.push_back(c);
      }
      ScheduleRequest req = Request(p, m, cost);
      for (ScheduleKind kind : kVKinds) {
        const std::string what = absl::StrCat(ScheduleName(kind), " p=", p, " m=", m);
        auto plan = GenerateSchedule(kind, req);
        if (kind == ScheduleKind::kDualPipeV && m < 2 * p) {
          EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << what;
          continue;
        }
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
        const double limit = DefaultMemoryLimit(kind, p, m, cost);
        ValidateOptions opts;
        opts.cost = &cost;
        opts.memory_limit = limit;
        ASSERT_TRUE(ValidatePlan(*plan, opts).ok()) << what << ": " << ValidatePlan(*plan, opts);
        auto sim = Simulate(*plan, cost);
        ASSERT_TRUE(sim.ok()) << what << ": " << sim.status();
        auto lowered = LowerComm(*plan);
        ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.status();
        ASSERT_TRUE(ValidatePlan(*lowered, opts).ok())
            << what << ": " << ValidatePlan(*lowered, opts);
        auto lowered_sim = Simulate(*lowered, cost);
        ASSERT_TRUE(lowered_sim.ok()) << what << ": " << lowered_sim.status();
        EXPECT_NEAR(lowered_sim->span, sim->span, 1e-9 * sim->span) << what;
        SimOptions strict;
        strict.blocking_recv = true;
        EXPECT_TRUE(Simulate(*lowered, cost, strict).ok()) << what;
        ++plans;
      }
    }
  }
  std::printf("%d plans checked\n", plans);
}

TEST(VShapeTest, GenerationTimeAtP32M256) {
  ScheduleRequest req = Request(32, 256, VCost(32, 9458, 9748, 7288, 879));
  for (ScheduleKind kind : kVKinds) {
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    auto plan = GenerateSchedule(kind, req);
    const double cpu = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto sim = Simulate(*plan, req.cost);
    ASSERT_TRUE(sim.ok()) << sim.status();
    std::printf("%s p=32 m=256: %.3f s wall, %.3f s cpu, bubble %.4f\n",
                std::string(ScheduleName(kind)).c_str(), secs, cpu, MeasureBubbles(*sim).per_rank);
  }
}

}  // namespace
}  // namespace zpipe::core
