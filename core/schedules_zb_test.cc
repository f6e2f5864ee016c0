// ZB-H1, ZB-H2, ZB-1p / ZB-2p / zb-auto: closed forms for uniform costs, properties over many
// shapes with random per-stage costs, clean errors, and generation time at p = 32, m = 256.
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

constexpr ScheduleKind kZbKinds[] = {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZb1p,
                                     ScheduleKind::kZb2p, ScheduleKind::kZbAuto};

// Memory shaped like the paper's: B frees most of the activation, W the rest.
StageCost Stage(double f, double b, double w) {
  return StageCost{.f = f, .b = b, .w = w, .mem_f = 1, .mem_b = -0.6, .mem_w = -0.4};
}

ScheduleRequest Request(int p, int m, const CostModel& cost) {
  ScheduleRequest req;
  req.pipeline = p;
  req.microbatches = m;
  req.cost = cost;
  return req;
}

// docs/design.md's span: the longest per-rank span from first start to last end of compute.
double DesignSpan(const Plan& plan, const SimResult& sim) {
  double span = 0;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    double first = 1e300, last = -1e300;
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      if (!IsCompute(plan.ranks[r][k].kind)) continue;
      first = std::min(first, sim.timings[r][k].start);
      last = std::max(last, sim.timings[r][k].end);
    }
    if (last >= first) span = std::max(span, last - first);
  }
  return span;
}

struct Generated {
  Plan plan;
  SimResult sim;
  double span = 0;  // docs/design.md span
};

Generated GenerateAndSimulate(ScheduleKind kind, const ScheduleRequest& req) {
  Generated g;
  absl::StatusOr<Plan> plan = GenerateSchedule(kind, req);
  EXPECT_TRUE(plan.ok()) << ScheduleName(kind) << ": " << plan.status();
  if (!plan.ok()) return g;
  g.plan = *plan;
  absl::StatusOr<SimResult> sim = Simulate(g.plan, req.cost);
  EXPECT_TRUE(sim.ok()) << sim.status();
  if (!sim.ok()) return g;
  g.sim = *sim;
  g.span = DesignSpan(g.plan, g.sim);
  return g;
}

// ZB-H1 keeps 1F1B's memory and turns its per-rank bubble (p-1)(F+B+W) into (p-1)(F+B-W) (the
// paper's Section 3.1, for T_W <= T_F + T_B and m >= p).
TEST(ZbClosedFormTest, H1BubbleIsPMinusOneTimesFPlusBMinusW) {
  for (const StageCost& c : {Stage(1, 1, 1), Stage(2, 3, 1.5), Stage(1, 2, 0.5), Stage(3, 2, 2)}) {
    for (int p : {2, 3, 4, 8}) {
      for (int m : {p, 2 * p, 3 * p + 1}) {
        const ScheduleRequest req = Request(p, m, CostModel::Uniform(p, c));
        const Generated g = GenerateAndSimulate(ScheduleKind::kZbH1, req);
        const double busy = m * (c.f + c.b + c.w);
        EXPECT_NEAR(g.span - busy, (p - 1) * (c.f + c.b - c.w), 1e-9)
            << "p=" << p << " m=" << m << " F/B/W=" << c.f << "/" << c.b << "/" << c.w;
      }
    }
  }
}

// ZB-H2 (memory (2p-1) M_F) has no bubble with T_F = T_B = T_W and no comm once the warm-up fits:
// m >= 2p - 1 microbatches.
TEST(ZbClosedFormTest, H2HasNoBubbleWithEqualCosts) {
  for (int p : {2, 3, 4, 8, 16}) {
    for (int m : {2 * p - 1, 2 * p, 4 * p}) {
      const StageCost c = Stage(1, 1, 1);
      const ScheduleRequest req = Request(p, m, CostModel::Uniform(p, c));
      const Generated g = GenerateAndSimulate(ScheduleKind::kZbH2, req);
      EXPECT_NEAR(g.span, m * 3.0, 1e-9) << "p=" << p << " m=" << m;
    }
  }
}

// ZB-2p reaches the memory bound for large m: rank 0 can run at most 2p Fs before its first B,
// which cannot start before p T_F + (p-1) T_B, so it idles max(0, (p-1) T_B - p T_F) and
// nothing else (no comm). With T_F >= T_B that is no bubble at all.
TEST(ZbClosedFormTest, Zb2pReachesTheMemoryBoundForLargeM) {
  for (const StageCost& c : {Stage(1, 1, 1), Stage(2, 3, 1.5), Stage(1.1, 1.0, 0.7)}) {
    for (int p : {4, 8, 16}) {
      const int m = 8 * p;
      const ScheduleRequest req = Request(p, m, CostModel::Uniform(p, c, /*comm=*/0));
      const Generated g = GenerateAndSimulate(ScheduleKind::kZb2p, req);
      const double busy = m * (c.f + c.b + c.w);
      const double bound = std::max(0.0, (p - 1) * c.b - p * c.f);
      EXPECT_LE(g.span - busy, bound + 1e-3 * busy)
          << "p=" << p << " F/B/W=" << c.f << "/" << c.b << "/" << c.w;
    }
  }
}

// The compact per-rank form of a plan, e.g. "F0 F1 B0 W0 ...", one string per rank.
std::vector<std::string> Compact(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& rank : plan.ranks) {
    std::string line;
    for (const Action& a : rank) {
      absl::StrAppend(&line, line.empty() ? "" : " ", ActionKindName(a.kind), a.microbatch);
    }
    out.push_back(line);
  }
  return out;
}

// Golden plans, p = 4, m = 8, T_F = T_B = T_W = 1, no comm: the parallelograms of the paper's
// ZB-H2 figure (2(p - r) - 1 warm-up Fs, then B/W alternating with the remaining Fs, Ws drained
// at the end) and the same shape for ZB-2p, both without a bubble.
TEST(ZbGoldenTest, P4M8) {
  const ScheduleRequest req = Request(4, 8, CostModel::Uniform(4, Stage(1, 1, 1)));
  const std::vector<std::string> h2 = {
      "F0 F1 F2 F3 F4 F5 F6 B0 W0 B1 F7 B2 W1 B3 W2 B4 W3 B5 W4 B6 W5 B7 W6 W7",
      "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 W0 B4 W1 B5 W2 B6 W3 B7 W4 W5 W6 W7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 W0 B6 W1 B7 W2 W3 W4 W5 W6 W7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 W0 W1 W2 W3 W4 W5 W6 W7"};
  const std::vector<std::string> two_p = {
      "F0 F1 F2 F3 F4 F5 F6 B0 F7 B1 W0 B2 W1 B3 W2 B4 W3 B5 W4 B6 W5 B7 W6 W7",
      "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 W0 B4 W1 B5 W2 B6 W3 B7 W4 W5 W6 W7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 W0 B6 W1 B7 W2 W3 W4 W5 W6 W7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 W0 W1 W2 W3 W4 W5 W6 W7"};
  const Generated g_h2 = GenerateAndSimulate(ScheduleKind::kZbH2, req);
  EXPECT_EQ(Compact(g_h2.plan), h2);
  EXPECT_DOUBLE_EQ(g_h2.span, 24);
  const Generated g_2p = GenerateAndSimulate(ScheduleKind::kZb2p, req);
  EXPECT_EQ(Compact(g_2p.plan), two_p);
  EXPECT_DOUBLE_EQ(g_2p.span, 24);
}

// Random per-stage costs: the memory shape of the paper (B frees a random share of the
// activation, W the rest) and a random comm latency.
CostModel RandomCost(int p, std::mt19937& rng) {
  std::uniform_real_distribution<double> time(0.5, 2.0), share(0.2, 0.9), mem(0.5, 1.5);
  CostModel cost;
  for (int s = 0; s < p; ++s) {
    StageCost c{.f = time(rng), .b = time(rng), .w = time(rng)};
    c.mem_f = mem(rng);
    c.mem_b = -share(rng) * c.mem_f;
    c.mem_w = -c.mem_f - c.mem_b;
    cost.stages.push_back(c);
  }
  cost.comm =
      std::bernoulli_distribution(0.3)(rng) ? 0 : std::uniform_real_distribution<>(0, 0.5)(rng);
  return cost;
}

void CheckPlan(ScheduleKind kind, const ScheduleRequest& req, double limit,
               const std::string& where) {
  SCOPED_TRACE(where);
  absl::StatusOr<Plan> plan = GenerateSchedule(kind, req);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_microbatches, req.microbatches);
  EXPECT_EQ(plan->placement, Placement::Linear(req.pipeline));
  ASSERT_TRUE(ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = limit}).ok())
      << ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = limit});
  for (const auto& rank : plan->ranks) {
    for (const Action& a : rank) {
      EXPECT_TRUE(a.kind == ActionKind::kForward || a.kind == ActionKind::kBackwardInput ||
                  a.kind == ActionKind::kBackwardWeight);
    }
  }
  absl::StatusOr<SimResult> sim = Simulate(*plan, req.cost);
  ASSERT_TRUE(sim.ok()) << sim.status();
  for (double peak : sim->peak_memory) EXPECT_LE(peak, limit + 1e-9 * std::max(1.0, limit));
  absl::StatusOr<Plan> lowered = LowerComm(*plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  ASSERT_TRUE(ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = limit}).ok())
      << ValidatePlan(*lowered, {.cost = &req.cost, .memory_limit = limit});
  absl::StatusOr<SimResult> lowered_sim = Simulate(*lowered, req.cost);
  ASSERT_TRUE(lowered_sim.ok()) << lowered_sim.status();
  EXPECT_NEAR(lowered_sim->span, sim->span, 1e-9 * sim->span);
  EXPECT_NEAR(DesignSpan(*lowered, *lowered_sim), DesignSpan(*plan, *sim), 1e-9 * sim->span);
  SimOptions strict;
  strict.blocking_recv = true;
  EXPECT_TRUE(Simulate(*lowered, req.cost, strict).ok());
}

TEST(ZbPropertyTest, RandomCostsValidateLowerAndFitMemory) {
  std::mt19937 rng(20240607);
  for (int p = 2; p <= 16; ++p) {
    for (int m : {1, 2, p - 1, p, 2 * p - 1, 37, 64}) {
      if (m < 1 || m > 64) continue;
      const CostModel cost = RandomCost(p, rng);
      // zb-auto's default limit is ZB-1p's; AutoUnderRandomLimits covers other limits.
      for (ScheduleKind kind :
           {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZb1p, ScheduleKind::kZb2p}) {
        ScheduleRequest req = Request(p, m, cost);
        const double limit = DefaultMemoryLimit(kind, p, m, cost);
        CheckPlan(kind, req, limit,
                  absl::StrCat(ScheduleName(kind), " p=", p, " m=", m, " comm=", cost.comm));
      }
    }
  }
}

// zb-auto under any limit from "one microbatch at a time" up to GPipe's.
TEST(ZbPropertyTest, AutoUnderRandomLimits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int p = std::uniform_int_distribution<>(2, 16)(rng);
    const int m = std::uniform_int_distribution<>(1, 64)(rng);
    const CostModel cost = RandomCost(p, rng);
    double max_f = 0;
    for (const StageCost& c : cost.stages) max_f = std::max(max_f, c.mem_f);
    ScheduleRequest req = Request(p, m, cost);
    req.memory_limit = std::uniform_real_distribution<>(max_f, (m + 1) * max_f)(rng);
    CheckPlan(ScheduleKind::kZbAuto, req, *req.memory_limit,
              absl::StrCat("zb-auto p=", p, " m=", m, " limit=", *req.memory_limit));
  }
}

TEST(ZbErrorTest, LimitBelowOneMicrobatchIsACleanError) {
  const CostModel cost = CostModel::Uniform(4, Stage(1, 1, 1));
  for (ScheduleKind kind : kZbKinds) {
    ScheduleRequest req = Request(4, 8, cost);
    req.memory_limit = 0.5;  // one activation needs 1
    absl::StatusOr<Plan> plan = GenerateSchedule(kind, req);
    ASSERT_FALSE(plan.ok()) << ScheduleName(kind);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
    EXPECT_NE(plan.status().message().find("memory_limit"), std::string::npos) << plan.status();
  }
}

TEST(ZbErrorTest, OneMicrobatchAtATimeStillWorks) {
  const CostModel cost = CostModel::Uniform(4, Stage(1, 1, 1));
  for (ScheduleKind kind : kZbKinds) {
    ScheduleRequest req = Request(4, 8, cost);
    req.memory_limit = 1;
    CheckPlan(kind, req, 1, std::string(ScheduleName(kind)));
  }
}

// A B that needs memory of its own (M_B > 0) must find room next to the Fs the scheduler ran;
// at the least limit every generator still finds a plan.
TEST(ZbErrorTest, BackwardThatAllocatesStillFits) {
  StageCost c = Stage(1, 1, 1);
  c.mem_b = 0.5;
  c.mem_w = -1.5;
  const CostModel cost = CostModel::Uniform(4, c, 0.1);
  for (ScheduleKind kind : kZbKinds) {
    for (double limit : {1.5, 2.0, 3.7}) {
      ScheduleRequest req = Request(4, 9, cost);
      req.memory_limit = limit;
      CheckPlan(kind, req, limit, absl::StrCat(ScheduleName(kind), " limit=", limit));
    }
  }
}

// ZB-1p is never worse than ZB-H1 (whose candidates it contains at this size), and twice the
// memory does not make zb-auto worse beyond noise (the greedy is not monotone in memory).
TEST(ZbPropertyTest, MoreMemoryNeverHurts) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int p = std::uniform_int_distribution<>(2, 12)(rng);
    const int m = std::uniform_int_distribution<>(p, 4 * p)(rng);
    const ScheduleRequest req = Request(p, m, RandomCost(p, rng));
    const double h1 = GenerateAndSimulate(ScheduleKind::kZbH1, req).span;
    const double one = GenerateAndSimulate(ScheduleKind::kZb1p, req).span;
    const double two = GenerateAndSimulate(ScheduleKind::kZb2p, req).span;
    EXPECT_LE(one, h1 * (1 + 1e-12)) << "p=" << p << " m=" << m;
    EXPECT_LE(two, one * 1.005) << "p=" << p << " m=" << m;
  }
}

// The performance goal: p = 32, m = 256 well under a second (Release, this 2-core machine). The
// bound is on the process's CPU time, which other jobs on a shared machine do not inflate.
TEST(ZbPerformanceTest, P32M256) {
  const ScheduleRequest req =
      Request(32, 256, CostModel::Uniform(32, Stage(10419, 10207, 7715), 408));
  for (ScheduleKind kind : kZbKinds) {
    const auto wall0 = std::chrono::steady_clock::now();
    const std::clock_t cpu0 = std::clock();
    absl::StatusOr<Plan> plan = GenerateSchedule(kind, req);
    const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::printf("%-8s p=32 m=256 generated in %.3f s CPU (%.3f s wall)\n",
                std::string(ScheduleName(kind)).c_str(), cpu, wall);
    // Speed is tracked by scripts/bench schedules, not asserted here (a loaded CI machine must
    // not fail a correctness suite); this test checks the large plan is produced and valid.
    EXPECT_TRUE(ValidatePlan(*plan, {.cost = &req.cost, .memory_limit = std::nullopt}).ok())
        << ScheduleName(kind);
  }
}

}  // namespace
}  // namespace zpipe::core
