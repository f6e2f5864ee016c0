// Re-planning from measured costs (schedule.replan_every), end to end with a real coordinator
// and real worker processes on loopback:
// - a synthetic job whose W becomes 3x slower after iteration 10 (model.synthetic.w_slowdown)
//   re-plans from the measured costs, every rank switches at one iteration (the event history
//   says when and why), and it measures a lower bubble after the switch than the same job
//   without re-planning; the new plan version survives a coordinator restart;
// - a GPT job that re-plans trains like one that does not: the same losses (to float rounding:
//   a new plan may sum gradients over microbatches in another order).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

namespace fs = std::filesystem;

testing::LocalClusterOptions Options(const fs::path& dir) {
  testing::LocalClusterOptions o;
  o.coordinator_bin = ZPIPE_COORDINATOR_BIN;
  o.worker_bin = ZPIPE_WORKER_BIN;
  o.comm_timeout_s = "30";
  o.db = (dir / "coordinator.db").string();
  return o;
}

constexpr int kSlowAfter = 10;
constexpr int kIterations = 36;

// p = 4 ZB-V with F = B = W = 20 ms per rank (10 ms per stage); W three times as slow from
// iteration 10 on. At the measured T_comm (about 0.05 ms) the plan made for 1x predicts a bubble
// of 0.037 at 3x W, one made for 3x 0.0004. (At 2x the gain is 0.015: the search finds plans for
// 1x that lose little when W slows, under the threshold below.)
v1::JobSpec SlowingSpec(const std::string& name, int replan_every) {
  v1::JobSpec spec;
  spec.set_name(name);
  auto* s = spec.mutable_model()->mutable_synthetic();
  s->set_forward_ms(20);
  s->set_backward_ms(20);
  s->set_weight_ms(20);
  s->set_activation_kb(16);
  s->mutable_w_slowdown()->set_after_iteration(kSlowAfter);
  s->mutable_w_slowdown()->set_factor(3);
  spec.mutable_parallel()->set_pipeline(4);
  spec.mutable_schedule()->set_kind("zb-v");
  spec.mutable_schedule()->set_replan_every(replan_every);
  // The real gain is 0.036; a threshold well under it but above what noisy measured costs
  // suggest on a loaded machine keeps the job to the one switch this test describes.
  spec.mutable_schedule()->set_replan_threshold(0.02);
  spec.mutable_batch()->set_microbatches(8);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(kIterations);
  spec.mutable_train()->set_lr(1e-3);
  return spec;
}

struct Followed {
  std::map<int, v1::IterationSummary> iterations;
  std::vector<v1::PlanSwitch> switches;
};

Followed Follow(Client& client, const std::string& id) {
  Followed out;
  auto watch = client.Watch(id);
  while (true) {
    auto event = watch->Next();
    if (!event.ok() || !event->has_value()) break;
    if ((*event)->has_iteration())
      out.iterations[(*event)->iteration().iteration()] = (*event)->iteration();
    if ((*event)->has_plan_switch()) out.switches.push_back((*event)->plan_switch());
  }
  return out;
}

// Mean measured bubble over iterations [from, to).
double MeanBubble(const Followed& f, int from, int to) {
  double sum = 0;
  int n = 0;
  for (int i = from; i < to; ++i) {
    auto it = f.iterations.find(i);
    if (it == f.iterations.end()) continue;
    sum += it->second.bubble_rate();
    ++n;
  }
  return n > 0 ? sum / n : -1;
}

TEST(Replan, SlowerWSwitchesEveryRankAndLowersTheBubble) {
  testing::TempDir dir("zpipe-replan-e2e");
  testing::LocalCluster cluster(4, Options(dir.path()));
  ASSERT_TRUE(cluster.WaitIdle(4));

  // Without re-planning: the plan made for W = 20 ms runs to the end.
  {
    auto submitted = cluster.client().Submit(SlowingSpec("fixed", 0), "fixed");
    ASSERT_TRUE(submitted.ok()) << submitted.status();
  }
  const Followed fixed = Follow(cluster.client(), "fixed");
  auto fixed_job = cluster.WaitTerminal("fixed", 300);
  ASSERT_TRUE(fixed_job.ok()) << fixed_job.status();
  ASSERT_EQ(fixed_job->state(), v1::JOB_STATE_SUCCEEDED) << fixed_job->reason();
  EXPECT_TRUE(fixed.switches.empty());
  EXPECT_EQ(fixed_job->plan_version(), 0);

  ASSERT_TRUE(cluster.WaitIdle(4));
  {
    auto submitted = cluster.client().Submit(SlowingSpec("replanned", 5), "replanned");
    ASSERT_TRUE(submitted.ok()) << submitted.status();
  }
  auto plan_before = cluster.client().Plan("replanned");
  ASSERT_TRUE(plan_before.ok()) << plan_before.status();
  const Followed replanned = Follow(cluster.client(), "replanned");
  auto job = cluster.WaitTerminal("replanned", 300);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();

  for (const v1::PlanSwitch& s : replanned.switches)
    std::printf("%s\n", s.ShortDebugString().c_str());
  // The event history: scheduled, then applied, from the window after the slowdown. On a loaded
  // machine a switch may first be abandoned (a rank passed its iteration before the plan reached
  // it; every rank kept the old plan) and scheduled again from a later window.
  const auto applied_at = std::find_if(
      replanned.switches.begin(), replanned.switches.end(),
      [](const v1::PlanSwitch& s) { return s.phase() == v1::PlanSwitch::PHASE_APPLIED; });
  ASSERT_NE(applied_at, replanned.switches.end());
  ASSERT_NE(applied_at, replanned.switches.begin());
  for (auto it = replanned.switches.begin(); it != applied_at; ++it) {
    const bool abandoned = (it - replanned.switches.begin()) % 2 == 1;
    EXPECT_EQ(it->phase(), abandoned ? v1::PlanSwitch::PHASE_ABANDONED
                                     : v1::PlanSwitch::PHASE_SCHEDULED)
        << it->reason();
  }
  const v1::PlanSwitch& scheduled = *(applied_at - 1);
  const v1::PlanSwitch& applied = *applied_at;
  EXPECT_EQ(scheduled.phase(), v1::PlanSwitch::PHASE_SCHEDULED);
  EXPECT_EQ(scheduled.switch_iteration(), applied.switch_iteration());
  EXPECT_EQ(applied.from_version(), 0);
  EXPECT_EQ(applied.to_version(), 1);
  EXPECT_GE(applied.measured_iteration(), kSlowAfter);
  EXPECT_GT(applied.switch_iteration(), applied.measured_iteration());
  EXPECT_LT(applied.new_predicted_bubble(), applied.old_predicted_bubble() - 0.01);
  EXPECT_NE(applied.reason().find("W 3."), std::string::npos) << applied.reason();
  // Atomic: every rank ran each iteration with one plan, the switch iteration the first of v1.
  const int at = applied.switch_iteration();
  for (const auto& [i, it] : replanned.iterations) {
    for (const v1::RankIterationStats& r : it.ranks()) {
      EXPECT_EQ(r.plan_version(), i >= at ? 1 : 0)
          << "iteration " << i << " rank " << r.pipeline_rank();
    }
  }
  EXPECT_EQ(job->plan_version(), 1);
  ASSERT_EQ(job->plan_costs_size(), 8);                // p * v stages
  EXPECT_NEAR(job->plan_costs(0).weight_ms(), 30, 5);  // measured: 3 x 10 ms per stage

  // The bubble after the switch, against the same iterations of the job that kept its plan.
  ASSERT_LT(at + 3, kIterations);
  const double with = MeanBubble(replanned, at + 1, kIterations);
  const double without = MeanBubble(fixed, at + 1, kIterations);
  std::printf(
      "measured bubble over iterations %d..%d: %.4f re-planned, %.4f fixed "
      "(predicted at measured costs %.4f -> %.4f)\n",
      at + 1, kIterations - 1, with, without, applied.old_predicted_bubble(),
      applied.new_predicted_bubble());
  EXPECT_LT(with, without);

  // A coordinator restart keeps the plan version, and regenerates the same plan from the
  // persisted costs.
  auto plan_after = cluster.client().Plan("replanned");
  ASSERT_TRUE(plan_after.ok()) << plan_after.status();
  EXPECT_EQ(plan_after->plan_version, 1);
  EXPECT_NE(core::PlanToText(plan_after->plan), core::PlanToText(plan_before->plan));
  cluster.StopCoordinator(SIGTERM);
  cluster.StartCoordinator();
  absl::StatusOr<v1::Job> reloaded = absl::UnavailableError("not yet");
  for (int i = 0; i < 100 && !reloaded.ok(); ++i) {
    reloaded = cluster.client().Get("replanned");
    if (!reloaded.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->plan_version(), 1);
  auto plan_reloaded = cluster.client().Plan("replanned");
  ASSERT_TRUE(plan_reloaded.ok()) << plan_reloaded.status();
  EXPECT_EQ(plan_reloaded->plan_version, 1);
  EXPECT_EQ(core::PlanToText(plan_reloaded->plan), core::PlanToText(plan_after->plan));
}

v1::JobSpec GptSpec(const std::string& name, int replan_every) {
  v1::JobSpec spec;
  spec.set_name(name);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(64);
  gpt->set_heads(2);
  gpt->set_seq_len(32);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_schedule()->set_kind("zb-v");
  spec.mutable_schedule()->set_replan_every(replan_every);
  spec.mutable_schedule()->set_replan_threshold(0);
  spec.mutable_batch()->set_microbatches(8);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(24);
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

TEST(Replan, GptLossesMatchAJobThatKeepsItsPlan) {
  testing::TempDir dir("zpipe-replan-gpt");
  testing::LocalCluster cluster(2, Options(dir.path()));
  ASSERT_TRUE(cluster.WaitIdle(2));
  std::map<std::string, Followed> runs;
  for (const auto& [id, every] :
       std::vector<std::pair<std::string, int>>{{"keep", 0}, {"replan", 2}}) {
    ASSERT_TRUE(cluster.WaitIdle(2));
    {
      auto submitted = cluster.client().Submit(GptSpec(id, every), id);
      ASSERT_TRUE(submitted.ok()) << submitted.status();
    }
    runs[id] = Follow(cluster.client(), id);
    auto job = cluster.WaitTerminal(id, 300);
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  }
  const Followed& keep = runs["keep"];
  const Followed& replan = runs["replan"];
  int applied = 0;
  for (const v1::PlanSwitch& s : replan.switches) {
    std::printf("%s\n", s.ShortDebugString().c_str());
    applied += s.phase() == v1::PlanSwitch::PHASE_APPLIED;
  }
  // Measured GPT costs differ from the planner's FLOP estimate (B and W are not F), so with a
  // zero threshold a plan made from them is usually taken; but whether it differs from the
  // estimate's plan depends on this machine's ratios of F, B and W. Without a switch there is
  // nothing to compare (the synthetic test above is the one that requires a switch).
  if (applied == 0) GTEST_SKIP() << "no re-plan was applied on this machine; nothing compared";
  ASSERT_EQ(keep.iterations.size(), replan.iterations.size());
  for (const auto& [i, it] : keep.iterations) {
    ASSERT_TRUE(it.has_loss());
    const double want = it.loss(), got = replan.iterations.at(i).loss();
    EXPECT_LT(std::abs(got - want), 1e-5 * std::abs(want)) << "iteration " << i;
  }
}

}  // namespace
}  // namespace zpipe
