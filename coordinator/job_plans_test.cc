// JobPlans on its own: a job's plan is made once, a re-plan check is due every replan_every
// complete iterations, a better plan goes to every rank for one switch iteration, and that
// iteration's summary settles it (applied or abandoned), with an event each time.
#include "coordinator/job_plans.h"

#include <map>
#include <string>
#include <vector>

#include "coordinator/testing/fake_connection.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

JobSpec Spec(const std::string& schedule) {
  JobSpec s;
  s.name = "unit";
  s.model = SyntheticConfig{1, 1, 1, 16, 8};
  s.pipeline = 2;
  s.schedule = schedule;
  s.microbatches = 4;
  s.microbatch_size = 1;
  s.iterations = 40;
  s.lr = 0.1;
  s.replan_every = 2;
  return s;
}

IterationSummary Summary(int iteration, int plan_version) {
  IterationSummary s;
  s.iteration = iteration;
  s.duration_s = 1;
  for (int r = 0; r < 2; ++r) {
    RankStats st;
    st.pipeline_rank = r;
    st.plan_version = plan_version;
    st.forward_s = st.backward_s = st.weight_s = 0.1;
    s.ranks.push_back(st);
  }
  return s;
}

class JobPlansTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_.id = "j";
    job_.spec = Spec("1f1b");
    job_.state = JobState::kRunning;
    job_.attempt = 1;
    for (int r = 0; r < 2; ++r) {
      job_.ranks.push_back(RankSlot{r, 0, "w" + std::to_string(r), "host", 0});
    }
    events_.Open(job_.id, 0);
  }

  // Observes iterations until a check is due.
  ReplanCheck DueCheck() {
    EXPECT_FALSE(plans_.Observe(job_, Summary(0, 0)).has_value());
    std::optional<ReplanCheck> check = plans_.Observe(job_, Summary(1, 0));
    EXPECT_TRUE(check.has_value());
    return check.value_or(ReplanCheck{});
  }

  // A proposal of another schedule, far better than the running plan.
  ReplanProposal Better() {
    ReplanProposal p;
    p.plan = *PlanJob(Spec("gpipe"), nullptr, {}, /*version=*/1);
    p.old_bubble = 0.5;
    p.new_bubble = 0.1;
    p.reason = "unit";
    return p;
  }

  WorkerConnection* ConnectionOf(const std::string& name) {
    auto it = connections_.find(name);
    return it == connections_.end() ? nullptr : &it->second;
  }

  std::vector<JobEvent> Events() {
    std::vector<JobEvent> out;
    events_.EventsAfter(job_.id, 0, &out);
    return out;
  }

  FakeClock clock_;
  NullMetrics metrics_;
  RunMonitor monitor_{metrics_};
  JobEventLog events_;
  JobPlans plans_{clock_, metrics_, monitor_, events_};
  JobRecord job_;
  std::map<std::string, FakeConnection> connections_;
};

TEST_F(JobPlansTest, MakesAPlanOnceAndKnowsIt) {
  EXPECT_FALSE(plans_.Known("j"));
  EXPECT_EQ(plans_.Find("j"), nullptr);
  std::shared_ptr<const JobPlan> plan = plans_.For(job_);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plans_.For(job_), plan);
  EXPECT_EQ(plans_.Find("j"), plan);
  EXPECT_TRUE(plans_.Known("j"));
}

// A restarted coordinator (a new JobPlans) makes the plan the ranks run from the job's record:
// the searched plan (schedule.search_budget's default) from the profiled layout and the costs
// and version of the last re-plan, the same every time.
TEST_F(JobPlansTest, ARestartedCoordinatorMakesThePlanTheRanksRun) {
  job_.spec = Spec("zb-v");
  job_.spec.pipeline = 4;
  job_.spec.microbatches = 8;
  ModelLayout layout;
  layout.source = "measured";
  for (int s = 0; s < 8; ++s) {
    ModelLayout::Stage st;
    st.stage = s;
    st.forward_ms = 1 + 0.3 * (s % 3);
    st.backward_ms = 1.5 + 0.2 * (s % 4);
    st.weight_ms = 0.7 + 0.1 * (s % 5);
    st.activation_kb = 64;
    st.params_mb = 1;
    layout.stages.push_back(st);
  }
  job_.layout = layout;
  // What the ranks run after profiling (ModelProfiling) ...
  absl::StatusOr<std::shared_ptr<const JobPlan>> profiled = PlanJob(job_.spec, &layout);
  ASSERT_TRUE(profiled.ok()) << profiled.status();
  std::shared_ptr<const JobPlan> made = plans_.For(job_);
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(made->text, (*profiled)->text);
  for (int s = 0; s < 8; ++s) EXPECT_EQ(made->cost.stages[s].f, layout.stages[s].forward_ms) << s;

  // ... and after re-plan v2 (ProposeReplan: the layout and the measured costs).
  job_.plan_version = 2;
  job_.plan_costs = {{0, 1.2, 2.0, 0.9}, {1, 1.1, 1.6, 0.5}, {2, 1.4, 1.9, 1.1},
                     {3, 0.9, 1.7, 0.6}, {4, 1.0, 1.8, 0.8}, {5, 1.3, 2.1, 0.7},
                     {6, 1.2, 1.5, 1.0}, {7, 0.8, 1.9, 0.9}};
  absl::StatusOr<std::shared_ptr<const JobPlan>> replanned =
      PlanJob(job_.spec, &layout, job_.plan_costs, 2);
  ASSERT_TRUE(replanned.ok()) << replanned.status();
  JobSpec greedy_spec = job_.spec;
  greedy_spec.search_budget = 0;
  absl::StatusOr<std::shared_ptr<const JobPlan>> greedy =
      PlanJob(greedy_spec, &layout, job_.plan_costs, 2);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_LT((*replanned)->sim.span, (*greedy)->sim.span);  // the search found a shorter plan
  for (int restart = 0; restart < 2; ++restart) {
    JobPlans fresh(clock_, metrics_, monitor_, events_);
    std::shared_ptr<const JobPlan> plan = fresh.For(job_);
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ(plan->version, 2);
    EXPECT_EQ(plan->text, (*replanned)->text) << "restart " << restart;
    EXPECT_EQ(plan->sim.span, (*replanned)->sim.span);
  }
}

TEST_F(JobPlansTest, ASwitchGoesToEveryRankAndIsAppliedWhenEveryRankRanIt) {
  std::shared_ptr<const JobPlan> old_plan = plans_.For(job_);
  connections_["w0"];
  connections_["w1"];
  const ReplanCheck check = DueCheck();
  EXPECT_EQ(check.plan, old_plan);
  EXPECT_EQ(check.window.iterations, 2);
  ASSERT_TRUE(plans_.MaybeSwitch(job_, check, Better(),
                                 [&](const std::string& n) { return ConnectionOf(n); }));
  for (auto& [name, connection] : connections_) {
    ASSERT_EQ(connection.commands.size(), 1u) << name;
    EXPECT_EQ(connection.commands[0].kind, WorkerCommand::Kind::kPlanUpdate);
    EXPECT_EQ(connection.commands[0].switch_iteration, 1 + 3);
  }
  // Reports of the switch iteration run with the new plan before it is settled.
  EXPECT_EQ(plans_.ForReport("j", 1)->version, 1);
  EXPECT_EQ(plans_.ForReport("j", 0), old_plan);
  EXPECT_FALSE(plans_.Observe(job_, Summary(4, 1)).has_value());
  EXPECT_EQ(job_.plan_version, 1);
  EXPECT_EQ(plans_.Find("j")->version, 1);
  const std::vector<JobEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].plan_switch.phase, PlanSwitchEvent::Phase::kScheduled);
  EXPECT_EQ(events[1].plan_switch.phase, PlanSwitchEvent::Phase::kApplied);
  EXPECT_EQ(job_.last_sequence, 2u);
}

// Iterations reported while the proposal was made (its search takes up to the search budget)
// push the switch back: it is timed from the latest reported iteration, not the measured one.
TEST_F(JobPlansTest, ASwitchIsTimedFromTheLatestReportedIteration) {
  plans_.For(job_);
  connections_["w0"];
  connections_["w1"];
  const ReplanCheck check = DueCheck();
  ASSERT_EQ(check.window.last_iteration, 1);
  job_.latest_summary = Summary(9, 0);
  ASSERT_TRUE(plans_.MaybeSwitch(job_, check, Better(),
                                 [&](const std::string& n) { return ConnectionOf(n); }));
  for (auto& [name, connection] : connections_) {
    ASSERT_EQ(connection.commands.size(), 1u) << name;
    EXPECT_EQ(connection.commands[0].switch_iteration, 9 + 3) << name;
  }
  const std::vector<JobEvent> events = Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].plan_switch.measured_iteration, 1);
  EXPECT_EQ(events[0].plan_switch.switch_iteration, 12);
}

TEST_F(JobPlansTest, ASwitchNoRankRanIsAbandoned) {
  std::shared_ptr<const JobPlan> old_plan = plans_.For(job_);
  connections_["w0"];
  connections_["w1"];
  ASSERT_TRUE(plans_.MaybeSwitch(job_, DueCheck(), Better(),
                                 [&](const std::string& n) { return ConnectionOf(n); }));
  plans_.Observe(job_, Summary(4, 0));
  EXPECT_EQ(job_.plan_version, 0);
  EXPECT_EQ(plans_.Find("j"), old_plan);
  const std::vector<JobEvent> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].plan_switch.phase, PlanSwitchEvent::Phase::kAbandoned);
}

TEST_F(JobPlansTest, NoSwitchWithoutGainOrWithARankAwayOrAfterANewAttempt) {
  plans_.For(job_);
  connections_["w0"];  // w1 has no session
  const ReplanCheck check = DueCheck();
  ReplanProposal same = Better();
  same.new_bubble = same.old_bubble;
  auto connection_of = [&](const std::string& n) { return ConnectionOf(n); };
  EXPECT_FALSE(plans_.MaybeSwitch(job_, check, same, connection_of));
  EXPECT_FALSE(plans_.MaybeSwitch(job_, check, Better(), connection_of));
  connections_["w1"];
  ++job_.attempt;
  EXPECT_FALSE(plans_.MaybeSwitch(job_, check, Better(), connection_of));
  EXPECT_TRUE(connections_["w0"].commands.empty());
  EXPECT_TRUE(Events().empty());
}

TEST_F(JobPlansTest, StartOverForgetsTheWindowAndTheSwitchOnItsWay) {
  plans_.For(job_);
  connections_["w0"];
  connections_["w1"];
  ASSERT_TRUE(plans_.MaybeSwitch(job_, DueCheck(), Better(),
                                 [&](const std::string& n) { return ConnectionOf(n); }));
  plans_.StartOver("j");
  EXPECT_EQ(plans_.ForReport("j", 1)->version, 0);                 // no switch on its way any more
  EXPECT_FALSE(plans_.Observe(job_, Summary(10, 0)).has_value());  // the window starts over
  EXPECT_TRUE(plans_.Observe(job_, Summary(11, 0)).has_value());
}

}  // namespace
}  // namespace zpipe::coordinator
