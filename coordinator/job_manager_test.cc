// JobManager logic with injected fakes: FakeClock drives liveness deterministically, fake
// connections record what workers would receive, the store is SQLite in memory (wrapped by a
// failing store to test that an unsaved job is never acknowledged).
#include "coordinator/job_manager.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/spec_defaults.h"
#include "coordinator/sqlite_job_store.h"
#include "coordinator/testing/fake_connection.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

JobSpec Spec(int p, int iterations = 2) {
  JobSpec s;
  s.name = "unit";
  s.model = SyntheticConfig{1, 1, 1, 16, 8};
  s.pipeline = p;
  s.schedule = "1f1b";
  s.microbatches = 4;
  s.microbatch_size = 1;
  s.iterations = iterations;
  s.lr = 0.1;
  return s;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*SqliteJobStore::Open(":memory:"));
    manager_ = MakeManager();
  }
  std::unique_ptr<JobManager> MakeManager() {
    ManagerOptions options;
    options.heartbeat_timeout = absl::Seconds(10);
    options.recovery_grace = absl::Seconds(10);
    auto m = std::make_unique<JobManager>(clock_, *store_, metrics_, options);
    EXPECT_TRUE(m->Load().ok());
    return m;
  }
  // Registers and attaches a worker; returns its id.
  std::string AddWorker(const std::string& name, FakeConnection* connection,
                        const std::string& running_job = "") {
    WorkerRegistration reg;
    reg.name = name;
    reg.running_job_id = running_job;
    return AddWorker(reg, connection);
  }
  std::string AddWorker(const WorkerRegistration& reg, FakeConnection* connection) {
    absl::StatusOr<RegisterResult> r = manager_->RegisterWorker(reg);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(manager_->AttachSession(r->worker_id, "", connection).ok());
    return r->worker_id;
  }

  // Stores, as an earlier coordinator left them, a job "ran" of `spec` in `ran_state` that ran
  // once, and a pending job "waiting" of the same spec that never ran; then starts a coordinator
  // on that store.
  void RestartWithAJobThatRanAndOneThatWaits(const JobSpec& spec, JobState ran_state) {
    JobRecord ran;
    ran.id = "ran";
    ran.spec = spec;
    ran.state = ran_state;
    ran.attempt = 1;
    ran.create_time = clock_.Now();
    ran.submit_order = 1;
    JobRecord waiting = ran;
    waiting.id = "waiting";
    waiting.state = JobState::kPending;
    waiting.attempt = 0;
    waiting.submit_order = 2;
    ASSERT_TRUE(store_->Put(ran, {}).ok());
    ASSERT_TRUE(store_->Put(waiting, {}).ok());
    manager_ = MakeManager();
  }

  FakeClock clock_;
  NullMetrics metrics_;
  std::unique_ptr<SqliteJobStore> store_;
  FakeConnection c0_, c1_;  // outlive the manager
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, SchedulesWhenEnoughWorkersAndFailsOnHeartbeatLoss) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kPending);
  const std::string w1 = AddWorker("b", &c1_);
  JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kRunning);
  ASSERT_EQ(c0_.commands.size(), 1u);
  EXPECT_EQ(c0_.commands[0].kind, WorkerCommand::Kind::kAssign);
  EXPECT_EQ(c0_.commands[0].assignment->self.pipeline_rank, 0);
  EXPECT_EQ(c1_.commands[0].assignment->self.pipeline_rank, 1);

  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(manager_->Heartbeat(w0).ok());
  manager_->CheckLiveness();
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRunning);
  clock_.Advance(absl::Seconds(6));  // b silent for 12 s, a for 6 s
  manager_->CheckLiveness();
  job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker b (pipeline rank 1, data rank 0) lost: no heartbeat for 12s");
  EXPECT_EQ(c1_.closed.code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(c0_.commands.size(), 2u);
  EXPECT_EQ(c0_.commands[1].kind, WorkerCommand::Kind::kCancel);
  EXPECT_EQ(manager_->Heartbeat(w1).code(), absl::StatusCode::kAborted);
}

TEST_F(JobManagerTest, AFailureBlamesThePeerWhoseSessionClosedAfterIt) {
  // w1 is killed: w0's stream to w1 breaks first, w1's session closes a moment later. The
  // reason names w1, the rank that died, then what w0 saw.
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kRunning);
  ASSERT_TRUE(
      manager_->RankFailed(w0, "j", 0, 0, "receiving activation: Connection reset by peer").ok());
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRunning);  // waiting for the cause
  clock_.Advance(absl::Milliseconds(300));
  manager_->DetachSession(w1, &c1_);
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker b (pipeline rank 1, data rank 0) lost: its session closed; then worker a "
            "(pipeline rank 0, data rank 0) failed: receiving activation: Connection reset by "
            "peer");
}

TEST_F(JobManagerTest, AFailureAfterThePeerIsGoneNamesThePeerAtOnce) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  manager_->DetachSession(w1, &c1_);
  ASSERT_TRUE(manager_->RankFailed(w0, "j", 0, 0, "send: Broken pipe").ok());
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason.rfind("worker b (pipeline rank 1, data rank 0) lost", 0), 0u)
      << job.record.reason;
}

TEST_F(JobManagerTest, AFailureWithNoLostPeerIsItsOwnCauseAfterTheGrace) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  ASSERT_TRUE(manager_->RankFailed(w1, "j", 1, 0, "data: token 900 >= vocab 512").ok());
  ASSERT_TRUE(manager_->RankFailed(w0, "j", 0, 0, "Connection reset by peer").ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(manager_->Heartbeat(w0).ok());
  ASSERT_TRUE(manager_->Heartbeat(w1).ok());
  manager_->CheckLiveness();
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRunning);
  clock_.Advance(absl::Seconds(3));
  manager_->CheckLiveness();
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker b (pipeline rank 1, data rank 0) failed: data: token 900 >= vocab 512");
}

TEST_F(JobManagerTest, ARanksOwnFailureAfterItsPeersBrokenConnectionIsTheCause) {
  // Rank 0's model raises: it closes its connections, and rank 1, whose receive broke, reports
  // first. Rank 0's own failure, arriving while rank 1's waits for a cause, is blamed at once.
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  ASSERT_TRUE(manager_->RankFailed(w1, "j", 1, 0, "recv: rank 0 closed its connection",
                                   /*permanent=*/false, /*peer_lost=*/true)
                  .ok());
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRunning);  // waiting for the cause
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(manager_->RankFailed(w0, "j", 0, 0, "Python raised ValueError").ok());
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker a (pipeline rank 0, data rank 0) failed: Python raised ValueError; then "
            "worker b (pipeline rank 1, data rank 0) failed: recv: rank 0 closed its connection");
}

TEST_F(JobManagerTest, ABrokenConnectionAfterARanksOwnFailureDoesNotReplaceIt) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  ASSERT_TRUE(manager_->RankFailed(w0, "j", 0, 0, "Python raised ValueError").ok());
  ASSERT_TRUE(manager_->RankFailed(w1, "j", 1, 0, "recv: rank 0 closed its connection",
                                   /*permanent=*/false, /*peer_lost=*/true)
                  .ok());
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(manager_->Heartbeat(w0).ok());
  ASSERT_TRUE(manager_->Heartbeat(w1).ok());
  manager_->CheckLiveness();
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker a (pipeline rank 0, data rank 0) failed: Python raised ValueError");
}

// Issue 30: a checkpoint disk that is full restarted the job three times, futilely, and once
// blamed a peer. A failure the worker marks permanent fails the job at once, naming its rank.
TEST_F(JobManagerTest, APermanentFailureFailsAtOnceWithoutRestartOrBlame) {
  JobSpec spec = Spec(2);
  spec.max_restarts = 3;
  ASSERT_TRUE(manager_->Submit("j", spec, false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kRunning);
  manager_->DetachSession(w1, &c1_);  // a peer that looks gone must not take the blame
  ASSERT_TRUE(manager_->RankFailed(w0, "j", 0, 0,
                                   "checkpoint: cannot write '/ckpt/iter-2/stage-0.pt': No space "
                                   "left on device",
                                   /*permanent=*/true)
                  .ok());
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.restarts, 0);
  EXPECT_EQ(job.record.reason,
            "worker a (pipeline rank 0, data rank 0) failed: checkpoint: cannot write "
            "'/ckpt/iter-2/stage-0.pt': No space left on device (not restarted: a restart cannot "
            "fix this)");
}

TEST_F(JobManagerTest, AWorkerThatLeavesFailsItsJobAtOnce) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2), false).ok());
  AddWorker("a", &c0_);
  const std::string w1 = AddWorker("b", &c1_);
  manager_->WorkerLeaving(w1, "signal 15 (SIGTERM)");
  const JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker b (pipeline rank 1, data rank 0) lost: left: signal 15 (SIGTERM)");
  EXPECT_EQ(c1_.closed.code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(c0_.commands.back().kind, WorkerCommand::Kind::kCancel);
}

TEST_F(JobManagerTest, ReportsBecomeSummariesAndFinishSucceeds) {
  ASSERT_TRUE(manager_->Submit("j", Spec(1, 1), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  const std::vector<int32_t> its = {0, 0, 0}, ops = {1, 4, 99}, stages = {0, 0, 0}, mbs = {0, 0, 7};
  ProgressBatchData batch;
  batch.job_id = "j";
  batch.events = {its, ops, stages, mbs};
  manager_->Progress("a", batch);
  EXPECT_EQ(manager_->dropped_progress_events(), 1u);  // the bad op / microbatch
  JobView job = *manager_->Get("j");
  ASSERT_TRUE(job.progress.has_value());
  EXPECT_EQ(job.progress->ranks[0].forward_done, 1);
  EXPECT_EQ(job.progress->ranks[0].backward_done, 1);
  EXPECT_EQ(job.progress->ranks[0].microbatches[0], Phase::kDone);

  RankStats stats;
  stats.duration_s = 2;
  stats.busy_s = 1.5;
  ASSERT_TRUE(manager_->IterationReport(w0, "j", 0, stats, 3.5).ok());
  job = *manager_->Get("j");
  ASSERT_TRUE(job.record.latest_summary.has_value());
  EXPECT_DOUBLE_EQ(job.record.latest_summary->bubble_rate, 0.25);
  EXPECT_DOUBLE_EQ(*job.record.latest_summary->loss, 3.5);
  std::vector<JobEvent> events;
  ASSERT_TRUE(manager_->events().EventsAfter("j", 0, &events));
  ASSERT_EQ(events.size(), 3u);  // SCHEDULING, RUNNING, iteration 0
  EXPECT_EQ(events[2].kind, JobEvent::Kind::kIteration);

  EXPECT_EQ(manager_->RankFinished(w0, "j", 1, 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(manager_->RankFinished(w0, "j", 0, 0).ok());
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kSucceeded);
  EXPECT_EQ(manager_->Workers(false)[0].state, WorkerState::kIdle);
}

// A deleted job leaves nothing behind: not its record (in memory or stored), history, progress,
// trace or logs; its id is free again.
TEST_F(JobManagerTest, DeletingAFinishedJobRemovesItsRecordHistoryTraceAndLogs) {
  ASSERT_TRUE(manager_->Submit("j", Spec(1, 1), false).ok());
  ASSERT_TRUE(manager_->Submit("keep", Spec(1, 1), false).ok());
  const std::string w0 = AddWorker("a", &c0_);
  RankStats stats;
  stats.duration_s = 2;
  stats.busy_s = 1.5;
  ASSERT_TRUE(manager_->IterationReport(w0, "j", 0, stats, 3.5).ok());
  ASSERT_TRUE(manager_->RankFinished(w0, "j", 0, 0).ok());
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kSucceeded);
  manager_->logs().Append("j", 0, 0, {{clock_.Now(), "hello"}}, 0);
  ASSERT_FALSE(manager_->logs().Read("j", {}).lines.empty());

  absl::StatusOr<JobState> deleted = manager_->Delete("j", /*force=*/false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, JobState::kSucceeded);
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("j").status()));
  EXPECT_TRUE(absl::IsNotFound(manager_->Trace("j", std::nullopt).status()));
  EXPECT_TRUE(absl::IsNotFound(manager_->SubmittedBy("j").status()));
  std::vector<JobEvent> events;
  EXPECT_FALSE(manager_->events().EventsAfter("j", 0, &events));
  EXPECT_TRUE(manager_->logs().Read("j", {}).lines.empty());
  absl::StatusOr<ListResult> list = manager_->List({}, 0, "");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->jobs[0].record.id, "keep");
  EXPECT_TRUE(absl::IsNotFound(manager_->Delete("j", false).status()));

  // Deleted from the store too: a restarted coordinator does not know it.
  manager_ = MakeManager();
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("j").status()));
  EXPECT_TRUE(manager_->Get("keep").ok());
  // The id can be used again.
  EXPECT_TRUE(manager_->Submit("j", Spec(1, 1), false).ok());
}

// Labels are kept with the job (across a restart too) and select jobs in List, with the creation
// time, before paging.
TEST_F(JobManagerTest, ListFiltersByLabelsAndCreationTimeBeforePaging) {
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Spec(2);
    spec.labels["team"] = i % 2 == 0 ? "nlp" : "vision";
    ASSERT_TRUE(manager_->Submit(absl::StrCat("j", i), spec, false).ok());
    clock_.Advance(absl::Minutes(1));
  }
  manager_ = MakeManager();  // reloaded from the store
  EXPECT_EQ(manager_->Get("j1")->record.spec.labels.at("team"), "vision");
  absl::StatusOr<ListResult> page = manager_->List({.labels = {{"team", "nlp"}}}, 2, "");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].record.id, "j0");
  EXPECT_EQ(page->jobs[1].record.id, "j2");
  page = manager_->List({.labels = {{"team", "nlp"}}}, 2, page->next_page_token);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].record.id, "j4");
  EXPECT_TRUE(page->next_page_token.empty());
  page = manager_->List({.created_after = clock_.Now() - absl::Seconds(150)}, 0, "");
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].record.id, "j3");
}

TEST_F(JobManagerTest, DeletingAnActiveJobNeedsForceWhichCancelsItFirst) {
  ASSERT_TRUE(manager_->Submit("j", Spec(1), false).ok());
  AddWorker("a", &c0_);
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kRunning);

  absl::StatusOr<JobState> r = manager_->Delete("j", /*force=*/false);
  ASSERT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_EQ(r.status().message(), "job 'j' is RUNNING; add --force to cancel it and delete it");
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRunning);

  r = manager_->Delete("j", /*force=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, JobState::kCancelled);
  ASSERT_EQ(c0_.commands.back().kind, WorkerCommand::Kind::kCancel);
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("j").status()));
  EXPECT_EQ(manager_->Workers(false)[0].state, WorkerState::kIdle);
  // A pending job is deleted the same way, and frees its place in the queue.
  ASSERT_TRUE(manager_->Submit("p1", Spec(2), false).ok());
  ASSERT_TRUE(manager_->Submit("p2", Spec(2), false).ok());
  EXPECT_EQ(manager_->Get("p2")->queue_position, 1);
  ASSERT_TRUE(manager_->Delete("p1", true).ok());
  EXPECT_EQ(manager_->Get("p2")->queue_position, 0);
}

// A progress batch may carry sends, receives and reductions beside compute: they reach the
// executed timeline (peer, chunk, bucket kept; aligned by the worker's clock offset like compute)
// and are neither progress nor dropped events.
TEST_F(JobManagerTest, CommAndReduceEventsReachTheTraceNotProgress) {
  ASSERT_TRUE(manager_->Submit("j", Spec(2, 1), false).ok());
  AddWorker("a", &c0_);
  AddWorker("b", &c1_);
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kRunning);
  // Worker b's clock is 2 s behind the coordinator's; its batch leaves right after its last end.
  const double t = absl::ToDoubleSeconds(clock_.Now() - absl::UnixEpoch()) - 2.0 - 0.010;
  // RECV_ACT s0 mb0 <- r0, F s1 mb0, SEND_GRAD s1 mb0 -> r0, REDUCE chunk0 bucket1.
  const std::vector<int32_t> its = {0, 0, 0, 0}, ops = {6, 1, 7, 9}, stages = {0, 1, 1, 0},
                             mbs = {0, 0, 0, 0}, peers = {0, -1, 0, -1}, chunks = {0, 0, 0, 0},
                             buckets = {0, 0, 0, 1};
  const std::vector<double> starts = {t - 0.009, t - 0.006, t - 0.004, t - 0.003},
                            ends = {t - 0.006, t - 0.005, t - 0.001, t};
  ProgressBatchData batch{"j", 1, 0, {its, ops, stages, mbs}, starts, ends, peers, chunks, buckets};
  manager_->Progress("b", batch);
  // The same with a ragged `peers`: the compute event counts, the receive is left out.
  const std::vector<int32_t> its2 = {0, 0}, ops2 = {6, 1}, stages2 = {0, 1}, mbs2 = {1, 1},
                             short_peers = {0};
  const std::vector<double> starts2 = {t - 0.002, t - 0.001}, ends2 = {t - 0.001, t - 0.0005};
  manager_->Progress("b", {.job_id = "j",
                           .pipeline_rank = 1,
                           .events = {its2, ops2, stages2, mbs2},
                           .start_times = starts2,
                           .end_times = ends2,
                           .peers = short_peers,
                           .chunks = {},
                           .buckets = {}});
  EXPECT_EQ(manager_->dropped_progress_events(), 0u);
  JobView job = *manager_->Get("j");
  ASSERT_TRUE(job.progress.has_value());
  EXPECT_EQ(job.progress->ranks[1].forward_done, 2);
  EXPECT_EQ(job.progress->ranks[1].backward_done, 0);

  absl::StatusOr<TraceView> view = manager_->Trace("j", 0);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->trace.ranks.size(), 2u);
  const std::vector<core::TimedAction>& got = view->trace.ranks[1].actions;
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].action, core::Action::Comm(core::ActionKind::kRecvAct, 0, 0, 0));
  EXPECT_EQ(got[1].action, core::Action::F(1, 0));
  EXPECT_EQ(got[2].action, core::Action::Comm(core::ActionKind::kSendGrad, 1, 0, 0));
  EXPECT_EQ(got[3].action, core::Action::Reduce(0, 1));
  EXPECT_EQ(got[4].action, core::Action::F(1, 1));
  // On the coordinator's clock: the worker's times + its 2 s (+ the 10 ms delay) offset.
  EXPECT_NEAR(view->trace.ranks[1].clock.offset_s, 2.010, 1e-6);
  EXPECT_NEAR(got[0].start, starts[0] + 2.010, 1e-6);
  EXPECT_NEAR(got[3].end, ends[3] + 2.010, 1e-6);
}

TEST_F(JobManagerTest, RestartReconcilesRunningJobs) {
  ASSERT_TRUE(manager_->Submit("keep", Spec(1), false).ok());
  AddWorker("a", &c0_);
  ASSERT_TRUE(manager_->Submit("lose", Spec(1), false).ok());
  AddWorker("b", &c1_);
  ASSERT_EQ(manager_->Get("lose")->record.state, JobState::kRunning);

  manager_ = MakeManager();  // a new coordinator on the same store
  EXPECT_EQ(manager_->Get("keep")->record.state, JobState::kRunning);
  FakeConnection back;
  WorkerRegistration reg;
  reg.name = "a";
  reg.running_job_id = "keep";
  absl::StatusOr<RegisterResult> r = manager_->RegisterWorker(reg);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->resume_running_job);
  ASSERT_TRUE(manager_->AttachSession(r->worker_id, "", &back).ok());

  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(manager_->Heartbeat(r->worker_id).ok());
  clock_.Advance(absl::Seconds(6));
  manager_->CheckLiveness();
  EXPECT_EQ(manager_->Get("keep")->record.state, JobState::kRunning);
  JobView lost = *manager_->Get("lose");
  EXPECT_EQ(lost.record.state, JobState::kFailed);
  EXPECT_EQ(lost.record.reason,
            "coordinator restarted and worker b (pipeline rank 0, data rank 0) did not reconnect "
            "within 10s");
  manager_.reset();  // before `back`
}

TEST_F(JobManagerTest, ALostRankRestartsTheJobUntilNoRestartsAreLeft) {
  JobSpec spec = Spec(2, 10);
  spec.max_restarts = 1;
  spec.restart_backoff = "3s";
  ASSERT_TRUE(manager_->Submit("j", spec, false).ok());
  const std::string a = AddWorker("a", &c0_);
  const std::string b = AddWorker("b", &c1_);
  FakeConnection spare_connection;
  const std::string spare = AddWorker("c", &spare_connection);
  ASSERT_EQ(manager_->Get("j")->record.state, JobState::kRunning);

  // b leaves: the job restarts instead of failing; a is cancelled and stays unavailable until
  // its heartbeat says it tore the attempt down.
  manager_->WorkerLeaving(b, "signal 15 (SIGTERM)");
  JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kRestarting);
  EXPECT_EQ(job.record.reason,
            "attempt 1: worker b (pipeline rank 1, data rank 0) lost: left: signal 15 (SIGTERM); "
            "restart 1 of 1 in 3s, from iteration 0 (no checkpoints)");
  EXPECT_EQ(job.record.restarts, 1);
  ASSERT_EQ(job.record.attempts.size(), 1u);
  EXPECT_EQ(job.record.attempts[0].end_reason,
            "worker b (pipeline rank 1, data rank 0) lost: left: signal 15 (SIGTERM)");
  EXPECT_EQ(c0_.commands.back().kind, WorkerCommand::Kind::kCancel);

  // Not before the backoff, and not on a worker still tearing the attempt down.
  clock_.Advance(absl::Seconds(2));
  manager_->CheckLiveness();
  EXPECT_EQ(manager_->Get("j")->record.state, JobState::kRestarting);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(manager_->Heartbeat(a, "j").ok());
  ASSERT_TRUE(manager_->Heartbeat(spare).ok());
  manager_->CheckLiveness();
  job = *manager_->Get("j");
  EXPECT_EQ(job.record.state, JobState::kRestarting);
  EXPECT_TRUE(
      absl::StrContains(job.record.reason, "; waiting for 2 idle cpu workers (1 available)"))
      << job.record.reason;
  ASSERT_TRUE(manager_->Heartbeat(a, "").ok());  // torn down: the job goes at once
  job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kRunning);
  EXPECT_EQ(job.record.attempt, 2);
  ASSERT_EQ(job.record.attempts.size(), 2u);
  EXPECT_EQ(job.record.attempts[1].workers, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(spare_connection.commands.back().kind, WorkerCommand::Kind::kAssign);
  EXPECT_EQ(spare_connection.commands.back().assignment->rendezvous_prefix, "j/a2/");

  // The second loss has no restart left.
  ASSERT_TRUE(manager_->RankFailed(a, "j", 0, 0, "boom").ok());
  clock_.Advance(absl::Seconds(4));
  ASSERT_TRUE(manager_->Heartbeat(spare).ok());
  manager_->CheckLiveness();
  job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kFailed);
  EXPECT_EQ(job.record.reason,
            "worker a (pipeline rank 0, data rank 0) failed: boom (no restarts left: 1 of 1 used)");
  EXPECT_EQ(job.record.attempts[1].end_reason, job.record.reason);

  // Attempts and restarts survive a coordinator restart.
  manager_ = MakeManager();
  job = *manager_->Get("j");
  EXPECT_EQ(job.record.restarts, 1);
  ASSERT_EQ(job.record.attempts.size(), 2u);
  EXPECT_EQ(job.record.attempts[0].workers, (std::vector<std::string>{"a", "b"}));
  manager_.reset();  // before spare_connection
}

TEST_F(JobManagerTest, AReloadedRunningJobKeepsItsIterationCount) {
  ASSERT_TRUE(manager_->Submit("j", Spec(1, 30), false).ok());
  const std::string a = AddWorker("a", &c0_);
  RankStats stats;
  for (int it = 0; it < 7; ++it)
    ASSERT_TRUE(manager_->IterationReport(a, "j", it, stats, 1.0).ok());
  ASSERT_EQ(manager_->Get("j")->progress->iterations_done, 7);

  manager_ = MakeManager();
  JobView job = *manager_->Get("j");
  ASSERT_EQ(job.record.state, JobState::kRunning);
  EXPECT_EQ(job.record.iterations_done, 7);
  ASSERT_TRUE(job.progress.has_value());
  EXPECT_EQ(job.progress->iterations_done, 7) << "progress restarted at 0";
  // The worker comes back (having finished its rank meanwhile) and its buffered reports follow.
  WorkerRegistration reg;
  reg.name = "a";
  reg.running_job_id = "j";
  reg.running_job_finished = true;
  FakeConnection back;
  const std::string again = AddWorker(reg, &back);
  ASSERT_TRUE(manager_->IterationReport(again, "j", 6, stats, 1.0).ok());  // already counted
  ASSERT_TRUE(manager_->IterationReport(again, "j", 29, stats, 0.5).ok());
  ASSERT_TRUE(manager_->RankFinished(again, "j", 0, 0).ok());
  job = *manager_->Get("j");
  EXPECT_EQ(job.record.state, JobState::kSucceeded);
  EXPECT_EQ(job.record.iterations_done, 30);
  EXPECT_EQ(job.record.latest_summary->iteration, 29);
  manager_.reset();  // before `back`
}

// Issue 30: a coordinator killed after storing an iteration's summary, before a watcher read it,
// lost the event: the restarted coordinator's event log started empty at the stored sequence, so
// the watcher resuming after the last event it saw got a snapshot. The events are stored with the
// job and come back.
TEST_F(JobManagerTest, AWatcherResumingAcrossARestartGetsTheEventsItMissed) {
  ASSERT_TRUE(manager_->Submit("j", Spec(1, 30), false).ok());
  const std::string a = AddWorker("a", &c0_);
  RankStats stats;
  for (int it = 0; it < 5; ++it)
    ASSERT_TRUE(manager_->IterationReport(a, "j", it, stats, 1.0).ok());
  std::vector<JobEvent> before;
  ASSERT_TRUE(manager_->events().EventsAfter("j", 0, &before));
  // State changes up to RUNNING, then five iterations.
  ASSERT_GE(before.size(), 6u);
  const size_t first_iteration = before.size() - 5;
  ASSERT_EQ(before[first_iteration].kind, JobEvent::Kind::kIteration);
  const uint64_t seen = before[first_iteration + 1].sequence;  // saw iteration 1, then the crash

  manager_ = MakeManager();  // a new coordinator on the same store
  std::vector<JobEvent> missed;
  ASSERT_TRUE(manager_->events().EventsAfter("j", seen, &missed))
      << "the watcher would get a snapshot, not the events it missed";
  ASSERT_EQ(missed.size(), 3u);
  for (size_t i = 0; i < missed.size(); ++i) {
    EXPECT_EQ(missed[i].sequence, before[first_iteration + 2 + i].sequence);
    EXPECT_EQ(missed[i].kind, JobEvent::Kind::kIteration);
    EXPECT_EQ(missed[i].summary.iteration, static_cast<int>(i) + 2);
  }
  // New events follow the stored ones without a gap once the worker is back.
  WorkerRegistration reg;
  reg.name = "a";
  reg.running_job_id = "j";
  FakeConnection back;
  const std::string again = AddWorker(reg, &back);
  ASSERT_TRUE(manager_->IterationReport(again, "j", 5, stats, 1.0).ok());
  ASSERT_TRUE(manager_->events().EventsAfter("j", seen, &missed));
  ASSERT_EQ(missed.size(), 4u);
  EXPECT_EQ(missed.back().sequence, before.back().sequence + 1);
  EXPECT_EQ(missed.back().summary.iteration, 5);
  manager_.reset();  // before `back`
}

TEST_F(JobManagerTest, PendingJobsWaitFifoPerDeviceKind) {
  JobSpec cuda = Spec(1);
  cuda.device = DeviceKind::kCuda;
  ASSERT_TRUE(manager_->Submit("big", Spec(2), false).ok());
  ASSERT_TRUE(manager_->Submit("gpu", cuda, false).ok());
  ASSERT_TRUE(manager_->Submit("small", Spec(1), false).ok());
  AddWorker("a", &c0_);
  // "small" fits but waits behind "big" (FIFO); "gpu" needs a CUDA worker.
  EXPECT_EQ(manager_->Get("small")->record.state, JobState::kPending);
  EXPECT_EQ(manager_->Get("small")->queue_position, 1);
  EXPECT_EQ(manager_->Get("gpu")->queue_position, 0);
  ASSERT_TRUE(manager_->Cancel("big", "").ok());
  EXPECT_EQ(manager_->Get("big")->record.reason, "cancelled by user");
  EXPECT_EQ(manager_->Get("small")->record.state, JobState::kRunning);
}

WorkerRegistration CudaWorker(const std::string& name, bool torch_cuda) {
  WorkerRegistration reg;
  reg.name = name;
  reg.device_kind = DeviceKind::kCuda;
  WorkerCapabilities caps;
  caps.libtorch_version = torch_cuda ? "2.3.1" : "1.13.0";
  caps.torch_cuda = torch_cuda;
  caps.cuda_device_count = torch_cuda ? 1 : 0;
  caps.nccl = torch_cuda;
  reg.capabilities = caps;
  return reg;
}

// A CUDA job goes only to workers whose reported LibTorch can run it, and says why while none
// can; CPU jobs keep to CPU workers.
TEST_F(JobManagerTest, CudaJobsGoOnlyToWorkersWithACudaLibTorch) {
  JobSpec cuda = Spec(1);
  cuda.device = DeviceKind::kCuda;
  ASSERT_TRUE(manager_->Submit("gpu", cuda, false).ok());
  AddWorker(CudaWorker("w0", /*torch_cuda=*/false), &c0_);
  JobView job = *manager_->Get("gpu");
  EXPECT_EQ(job.record.state, JobState::kPending);
  EXPECT_EQ(job.record.reason,
            "waiting for 1 idle cuda workers (0 available); 0 of 1 registered worker can run cuda "
            "jobs (w0: LibTorch 1.13.0 CPU-only)");
  EXPECT_TRUE(c0_.commands.empty());

  // Neither does a CUDA worker take a CPU job.
  ASSERT_TRUE(manager_->Submit("cpu", Spec(1), false).ok());
  EXPECT_EQ(manager_->Get("cpu")->record.reason,
            "waiting for 1 idle cpu workers (0 available); 0 of 1 registered worker can run cpu "
            "jobs (w0: started for cuda:0)");
  AddWorker(CudaWorker("w1", /*torch_cuda=*/true), &c1_);
  EXPECT_EQ(manager_->Get("cpu")->record.state, JobState::kPending);
  job = *manager_->Get("gpu");
  ASSERT_EQ(job.record.state, JobState::kRunning);
  ASSERT_EQ(job.record.ranks.size(), 1u);
  EXPECT_EQ(job.record.ranks[0].worker_name, "w1");
  ASSERT_EQ(c1_.commands.size(), 1u);
  EXPECT_EQ(c1_.commands[0].kind, WorkerCommand::Kind::kAssign);
}

TEST_F(JobManagerTest, CapabilitiesAreListedAndBounded) {
  WorkerRegistration reg = CudaWorker("w0", true);
  reg.capabilities->devices.push_back({0, "NVIDIA H100", 80ull << 30});
  AddWorker(reg, &c0_);
  std::vector<WorkerInfo> workers = manager_->Workers(false);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].registration.capabilities, reg.capabilities);

  reg.name = "w1";
  reg.capabilities->libtorch_version = std::string(65, '1');
  absl::StatusOr<RegisterResult> r = manager_->RegisterWorker(reg);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_EQ(r.status().message(), "capabilities.libtorch_version: at most 64 characters");
}

// A store whose writes fail while `fail` is set (a full or read-only disk), over a real one.
class FailingStore : public JobStore {
 public:
  explicit FailingStore(JobStore& base) : base_(base) {}
  absl::Status Put(const JobRecord& job, absl::Span<const JobEvent> events) override {
    if (fail) return absl::ResourceExhaustedError("database or disk is full");
    return base_.Put(job, events);
  }
  absl::Status Delete(const std::string& job_id) override {
    if (fail) return absl::ResourceExhaustedError("database or disk is full");
    return base_.Delete(job_id);
  }
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override { return base_.LoadAll(); }
  absl::StatusOr<std::vector<JobEvent>> LoadEvents(const std::string& job_id) override {
    return base_.LoadEvents(job_id);
  }
  bool fail = false;

 private:
  JobStore& base_;
};

TEST(JobManagerStoreTest, SubmitFailsAndForgetsTheJobWhenTheStoreCannotSaveIt) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> sqlite = std::move(*SqliteJobStore::Open(":memory:"));
  FailingStore store(*sqlite);
  auto manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());

  store.fail = true;
  absl::StatusOr<SubmitResult> r = manager->Submit("lost", Spec(2), false);
  // A full store is RESOURCE_EXHAUSTED saying so (not UNAVAILABLE: the coordinator is there).
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "the coordinator's job store is full and could not save job "
                                "'lost' (database or disk is full); the job was not created"))
      << r.status();
  EXPECT_TRUE(absl::IsNotFound(manager->Get("lost").status()));
  EXPECT_TRUE(manager->List({}, 0, "")->jobs.empty());

  // Once the store works again the same id is a new job, and it survives a restart.
  store.fail = false;
  r = manager->Submit("lost", Spec(2), false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->created);
  manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  EXPECT_EQ(manager->Get("lost")->record.state, JobState::kPending);
}

// Issue 30: with the store's disk full when a job finished, SUCCEEDED was never stored and a
// restarted coordinator ran the job again. The change stays in memory, is written again until the
// store takes it, and meanwhile the coordinator says so (StoreStatus for /readyz, new jobs refused
// with RESOURCE_EXHAUSTED). The restored job also keeps its iteration count.
TEST(JobManagerStoreTest, ATerminalStateTheStoreRefusesIsWrittenOnceItHasRoom) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> sqlite = std::move(*SqliteJobStore::Open(":memory:"));
  FailingStore store(*sqlite);
  auto manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  ASSERT_TRUE(manager->Submit("j", Spec(1, 3), false).ok());
  FakeConnection c;
  WorkerRegistration reg;
  reg.name = "a";
  absl::StatusOr<RegisterResult> w = manager->RegisterWorker(reg);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(manager->AttachSession(w->worker_id, "", &c).ok());
  ASSERT_EQ(manager->Get("j")->record.state, JobState::kRunning);
  EXPECT_TRUE(manager->StoreStatus().ok());

  store.fail = true;  // the disk fills up while the job runs
  RankStats stats;
  for (int it = 0; it < 3; ++it) {
    ASSERT_TRUE(manager->IterationReport(w->worker_id, "j", it, stats, 1.0).ok());
  }
  ASSERT_TRUE(manager->RankFinished(w->worker_id, "j", 0, 0).ok());
  EXPECT_EQ(manager->Get("j")->record.state, JobState::kSucceeded);
  const absl::Status status = manager->StoreStatus();
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "the coordinator's job store is full: 1 job's "
                                                  "latest change waits to be written"))
      << status;
  absl::StatusOr<SubmitResult> refused = manager->Submit("next", Spec(1), false);
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "job 'next' was not created: the coordinator's job store is full"))
      << refused.status();
  manager->CheckLiveness();  // a retry the store still refuses
  EXPECT_FALSE(manager->StoreStatus().ok());

  store.fail = false;  // space is freed: the next liveness check writes the job
  manager->CheckLiveness();
  EXPECT_TRUE(manager->StoreStatus().ok());
  EXPECT_TRUE(manager->Submit("next", Spec(1), false).ok());

  manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  const JobView job = *manager->Get("j");
  EXPECT_EQ(job.record.state, JobState::kSucceeded) << "the finished job would run again";
  EXPECT_EQ(job.record.iterations_done, 3);
  ASSERT_TRUE(job.progress.has_value()) << "a restored finished job shows no progress";
  EXPECT_EQ(job.progress->iterations_done, 3) << "a restored finished job shows 0 done";
  EXPECT_EQ(job.progress->iterations_total, 3);
  manager.reset();  // before `c`
}

// A cancel is acknowledged only once it is stored: while the store refuses, the caller gets the
// store's error (and the job is stopped all the same); a cancel once it has room answers OK.
TEST(JobManagerStoreTest, ACancelIsAcknowledgedOnlyOnceStored) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> sqlite = std::move(*SqliteJobStore::Open(":memory:"));
  FailingStore store(*sqlite);
  auto manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  ASSERT_TRUE(manager->Submit("j", Spec(2), false).ok());

  store.fail = true;
  absl::StatusOr<JobView> r = manager->Cancel("j", "");
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "job 'j' is cancelled but the coordinator's job store refused to "
                                "save it (database or disk is full)"))
      << r.status();
  EXPECT_TRUE(absl::IsResourceExhausted(manager->Cancel("j", "").status()));  // still unsaved

  store.fail = false;
  r = manager->Cancel("j", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->record.state, JobState::kCancelled);
  manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  EXPECT_EQ(manager->Get("j")->record.state, JobState::kCancelled);
}

TEST(JobManagerStoreTest, ADeleteIsAcknowledgedOnlyOnceTheStoreRemovedIt) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> sqlite = std::move(*SqliteJobStore::Open(":memory:"));
  FailingStore store(*sqlite);
  auto manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  ASSERT_TRUE(manager->Submit("j", Spec(2), false).ok());
  ASSERT_TRUE(manager->Cancel("j", "").ok());

  store.fail = true;
  absl::StatusOr<JobState> r = manager->Delete("j", false);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "job 'j' is not deleted: the coordinator's job store refused"))
      << r.status();
  EXPECT_EQ(manager->Get("j")->record.state, JobState::kCancelled);  // still there

  store.fail = false;
  ASSERT_TRUE(manager->Delete("j", false).ok());
  manager = std::make_unique<JobManager>(clock, store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager->Load().ok());
  EXPECT_TRUE(absl::IsNotFound(manager->Get("j").status()));
}

// --retain-count and --retain-finished: the liveness loop deletes the finished jobs past either,
// store and all; active jobs are never touched.
TEST(JobManagerRetentionTest, FinishedJobsBeyondTheCountOrAgeAreDeleted) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> store = std::move(*SqliteJobStore::Open(":memory:"));
  ManagerOptions options;
  options.retain_count = 2;
  options.retain_finished = absl::Hours(1);
  auto manager = std::make_unique<JobManager>(clock, *store, metrics, options);
  ASSERT_TRUE(manager->Load().ok());
  for (const char* id : {"a", "b", "c", "active"}) {
    ASSERT_TRUE(manager->Submit(id, Spec(2), false).ok());
  }
  // Finished in the order b, a, c: the two that finished last are kept.
  for (const char* id : {"b", "a", "c"}) {
    ASSERT_TRUE(manager->Cancel(id, "").ok());
    clock.Advance(absl::Minutes(1));
  }
  manager->CheckLiveness();
  EXPECT_TRUE(absl::IsNotFound(manager->Get("b").status()));
  EXPECT_TRUE(manager->Get("a").ok());
  EXPECT_TRUE(manager->Get("c").ok());

  // An hour after it ended, a finished job goes too; "c" ended a minute after "a".
  clock.Advance(absl::Minutes(58) + absl::Seconds(30));
  manager->CheckLiveness();
  EXPECT_TRUE(absl::IsNotFound(manager->Get("a").status()));
  EXPECT_TRUE(manager->Get("c").ok());
  clock.Advance(absl::Hours(5));
  manager->CheckLiveness();
  EXPECT_TRUE(absl::IsNotFound(manager->Get("c").status()));
  EXPECT_EQ(manager->Get("active")->record.state, JobState::kPending);

  // Deleted from the store: a restarted coordinator has only the active job.
  manager = std::make_unique<JobManager>(clock, *store, metrics, options);
  ASSERT_TRUE(manager->Load().ok());
  absl::StatusOr<ListResult> list = manager->List({}, 0, "");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->jobs[0].record.id, "active");
}

TEST(JobManagerRetentionTest, WithoutRetentionFlagsFinishedJobsStay) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> store = std::move(*SqliteJobStore::Open(":memory:"));
  JobManager manager(clock, *store, metrics, ManagerOptions{});
  ASSERT_TRUE(manager.Load().ok());
  ASSERT_TRUE(manager.Submit("j", Spec(2), false).ok());
  ASSERT_TRUE(manager.Cancel("j", "").ok());
  clock.Advance(absl::Hours(24 * 365));
  manager.CheckLiveness();
  EXPECT_TRUE(manager.Get("j").ok());
}

// The real store on a "full disk": SQLite's max_page_count stops it growing, and a write past it
// is RESOURCE_EXHAUSTED, which the manager reports as a full store.
TEST(JobManagerStoreTest, SqliteAtItsPageLimitIsAFullStore) {
  FakeClock clock;
  NullMetrics metrics;
  std::unique_ptr<SqliteJobStore> sqlite = std::move(*SqliteJobStore::Open(":memory:"));
  JobManager manager(clock, *sqlite, metrics, ManagerOptions{});
  ASSERT_TRUE(manager.Load().ok());
  ASSERT_TRUE(sqlite->SetMaxPagesForTest(1).ok());  // no page beyond those in use
  absl::Status st;
  for (int i = 0; i < 100 && st.ok(); ++i) {
    st = manager.Submit(absl::StrCat("j", i), Spec(2), false).status();
  }
  ASSERT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "job store is full")) << st;
}

// The job is its resolved spec: what is stored and shown, and what a resubmit is compared with.
TEST_F(JobManagerTest, RawAndResolvedSpecsAreTheSameJob) {
  const JobSpec raw = Spec(2);
  absl::StatusOr<SubmitResult> first = manager_->Submit("same", raw, false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->job.record.spec, ResolveSpecDefaults(raw));
  EXPECT_EQ(manager_->Get("same")->record.spec.optimizer, "adamw");
  EXPECT_EQ(manager_->List({}, 0, "")->jobs[0].record.spec, ResolveSpecDefaults(raw));
  // validate_only answers with the resolved spec too (submit --dry-run).
  EXPECT_EQ(manager_->Submit("", raw, true)->job.record.spec, ResolveSpecDefaults(raw));

  absl::StatusOr<SubmitResult> resolved = manager_->Submit("same", ResolveSpecDefaults(raw), false);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_FALSE(resolved->created);
  absl::StatusOr<SubmitResult> again = manager_->Submit("same", raw, false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);

  JobSpec other = ResolveSpecDefaults(raw);
  other.train.weight_decay = 0.02;  // a default changed is a different job
  absl::StatusOr<SubmitResult> refused = manager_->Submit("same", other, false);
  ASSERT_TRUE(absl::IsAlreadyExists(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "different spec"));
}

// A job stored by a coordinator from before defaults were resolved holds the raw spec; a new
// coordinator serves it resolved and still knows a resubmit of either form as that job.
TEST_F(JobManagerTest, ARawSpecFromAnOlderStoreIsResolvedOnLoad) {
  JobRecord old;
  old.id = "old";
  old.spec = Spec(2);
  old.state = JobState::kPending;
  old.create_time = clock_.Now();
  old.submit_order = 1;
  ASSERT_TRUE(store_->Put(old, {}).ok());
  ASSERT_EQ(store_->LoadAll()->at(0).spec, Spec(2));  // raw in the store, as written then

  manager_ = MakeManager();
  absl::StatusOr<JobView> loaded = manager_->Get("old");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->record.spec, ResolveSpecDefaults(Spec(2)));
  EXPECT_EQ(loaded->record.spec.restart_backoff, "2s");
  EXPECT_EQ(loaded->record.state, JobState::kPending);

  absl::StatusOr<SubmitResult> raw = manager_->Submit("old", Spec(2), false);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_FALSE(raw->created);
  absl::StatusOr<SubmitResult> resolved =
      manager_->Submit("old", ResolveSpecDefaults(Spec(2)), false);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_FALSE(resolved->created);
  EXPECT_TRUE(absl::IsAlreadyExists(manager_->Submit("old", Spec(2, 5), false).status()));
}

// A job stored before jobs searched that ran was planned with the greedy pass, which its ranks
// run: it is loaded with schedule.search_budget 0 and gets that plan again. One that never ran
// is planned like a new submit (the search, budget 1).
TEST_F(JobManagerTest, AJobThatRanBeforeJobsSearchedKeepsTheGreedyPlan) {
  JobSpec spec = Spec(4);
  spec.schedule = "zb-v";
  spec.microbatches = 8;
  spec.model = SyntheticConfig{2, 2, 2, 97.65625, 8};  // per stage 1, 1, 1, T_comm 0.1
  RestartWithAJobThatRanAndOneThatWaits(spec, JobState::kSucceeded);
  JobSpec greedy = ResolveSpecDefaults(spec);
  greedy.search_budget = 0;
  absl::StatusOr<std::shared_ptr<const JobPlan>> expected = PlanJob(greedy);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<JobView> view = manager_->Get("ran");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->record.spec.search_budget, 0);
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = manager_->Plan("ran");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->text, (*expected)->text);

  view = manager_->Get("waiting");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->record.spec.search_budget, 1);
  plan = manager_->Plan("waiting");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::shared_ptr<const JobPlan>> searched = PlanJob(ResolveSpecDefaults(spec));
  ASSERT_TRUE(searched.ok()) << searched.status();
  EXPECT_EQ((*plan)->text, (*searched)->text);
  EXPECT_LT((*plan)->sim.span, (*expected)->sim.span);
}

// A job stored before plans were polished (its resolved spec has search_budget 1 and no polish)
// that ran keeps the plan its ranks run: it is loaded with schedule.polish false. One that never
// ran is planned like a new submit, polished (1F1B at m = p: shorter than the published order).
TEST_F(JobManagerTest, AJobThatRanBeforePlansWerePolishedKeepsItsPlan) {
  JobSpec spec = Spec(4);
  spec.model = SyntheticConfig{1, 1, 1, 97.65625, 8};  // T_comm 0.1 per hand-over
  spec = ResolveSpecDefaults(spec);
  spec.polish.reset();  // as the previous coordinator stored it
  RestartWithAJobThatRanAndOneThatWaits(spec, JobState::kRunning);
  JobSpec unpolished = spec;
  unpolished.polish = false;
  absl::StatusOr<std::shared_ptr<const JobPlan>> expected = PlanJob(unpolished);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<JobView> view = manager_->Get("ran");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->record.spec.polish, false);
  EXPECT_EQ(view->record.spec.search_budget, 1);
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = manager_->Plan("ran");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->text, (*expected)->text);

  view = manager_->Get("waiting");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->record.spec.polish, true);
  plan = manager_->Plan("waiting");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::shared_ptr<const JobPlan>> polished = PlanJob(ResolveSpecDefaults(spec));
  ASSERT_TRUE(polished.ok()) << polished.status();
  EXPECT_EQ((*plan)->text, (*polished)->text);
  EXPECT_LT((*plan)->sim.span, (*expected)->sim.span);
}

TEST_F(JobManagerTest, PendingJobLimitRefusesNewJobsButNotResubmits) {
  ManagerOptions options;
  options.max_pending_jobs = 2;
  manager_ = std::make_unique<JobManager>(clock_, *store_, metrics_, options);
  ASSERT_TRUE(manager_->Load().ok());
  ASSERT_TRUE(manager_->Submit("p1", Spec(2), false).ok());
  ASSERT_TRUE(manager_->Submit("p2", Spec(2), false).ok());

  absl::StatusOr<SubmitResult> r = manager_->Submit("p3", Spec(2), false);
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(r.status().message(),
            "2 jobs are pending (the --max-pending-jobs limit of 2); wait or cancel some");
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("p3").status()));
  // validate_only creates nothing, so the limit does not apply.
  EXPECT_TRUE(manager_->Submit("p3", Spec(2), true).ok());
  // Resubmitting an existing job answers as before (idempotent).
  r = manager_->Submit("p1", Spec(2), false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->created);

  ASSERT_TRUE(manager_->Cancel("p1", "").ok());
  EXPECT_TRUE(manager_->Submit("p3", Spec(2), false).ok());
}

TEST_F(JobManagerTest, PerClientPendingLimitLeavesRoomForOtherClients) {
  ManagerOptions options;
  options.max_pending_jobs = 10;
  options.max_pending_jobs_per_client = 2;
  manager_ = std::make_unique<JobManager>(clock_, *store_, metrics_, options);
  ASSERT_TRUE(manager_->Load().ok());
  ASSERT_TRUE(manager_->Submit("a1", Spec(2), false, "alice").ok());
  ASSERT_TRUE(manager_->Submit("a2", Spec(2), false, "alice").ok());

  absl::StatusOr<SubmitResult> r = manager_->Submit("a3", Spec(2), false, "alice");
  ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(r.status().message(),
            "2 jobs of 'alice' are pending (the --max-pending-jobs-per-client limit of 2); wait "
            "or cancel some of yours");
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("a3").status()));
  // Another client still gets in; so does alice's resubmit, and callers without a token name
  // (no token files) only meet the global limit.
  EXPECT_TRUE(manager_->Submit("b1", Spec(2), false, "bob").ok());
  EXPECT_FALSE(manager_->Submit("a1", Spec(2), false, "alice")->created);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(manager_->Submit(absl::StrCat("anon", i), Spec(2), false).ok());
  }
  ASSERT_TRUE(manager_->Cancel("a1", "").ok());
  EXPECT_TRUE(manager_->Submit("a3", Spec(2), false, "alice").ok());
}

// A Python model is code the workers run: without ManagerOptions::python_models (the
// coordinator's --allow-python-models, or a loopback --listen) it is refused naming the flag, and
// nothing is created; the same spec as TorchScript is accepted.
TEST_F(JobManagerTest, PythonModelsNeedTheFlag) {
  ManagerOptions options;
  options.python_models = false;
  manager_ = std::make_unique<JobManager>(clock_, *store_, metrics_, options);
  ASSERT_TRUE(manager_->Load().ok());
  JobSpec spec = Spec(2);
  spec.model = PythonConfig{"/data/model.py", "build_model", "{}", {}};
  spec.data_file = DataConfig{"/data/train.bin", "", std::nullopt, 16};
  absl::StatusOr<SubmitResult> r = manager_->Submit("py", spec, false);
  ASSERT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "--allow-python-models")) << r.status();
  EXPECT_TRUE(absl::IsNotFound(manager_->Get("py").status()));
  spec.model = TorchScriptConfig{"/data/model.pt", {}};
  EXPECT_TRUE(manager_->Submit("ts", spec, false).ok());

  options.python_models = true;
  manager_ = std::make_unique<JobManager>(clock_, *store_, metrics_, options);
  ASSERT_TRUE(manager_->Load().ok());
  spec.model = PythonConfig{"/data/model.py", "build_model", "{}", {}};
  r = manager_->Submit("py", spec, false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::get<PythonConfig>(r->job.record.spec.model).file, "/data/model.py");
}

}  // namespace
}  // namespace zpipe::coordinator

namespace zpipe::coordinator {
namespace {

// Rank r's report of one iteration of `plan` run at `cost` (ms), with `version`.
RankStats ReportAt(const JobPlan& plan, const core::CostModel& cost, int r, int version) {
  RankStats s;
  s.pipeline_rank = r;
  s.plan_version = version;
  s.duration_s = 1;
  for (const core::Action& a : plan.plan.ranks[r]) {
    const double secs = cost.Duration(a) / 1e3;
    if (a.kind == core::ActionKind::kForward) s.forward_s += secs;
    if (a.kind == core::ActionKind::kBackwardInput) s.backward_s += secs;
    if (a.kind == core::ActionKind::kBackwardWeight) s.weight_s += secs;
  }
  s.busy_s = s.forward_s + s.backward_s + s.weight_s;
  return s;
}

class ReplanTest : public JobManagerTest {
 protected:
  void TearDown() override { manager_.reset(); }  // before c2_, c3_
  // Runs "j" (ZB-V, p = 4, m = 8, replan_every 2) to the point where a re-plan for W 2x slower
  // was sent (at 2x W its plan predicts a bubble of 0.045, one made for 2x W 0).
  void StartAndSlowDown() {
    JobSpec spec = Spec(4, 20);
    spec.model = SyntheticConfig{10, 10, 10, 16, 8};
    spec.schedule = "zb-v";
    spec.microbatches = 8;
    spec.replan_every = 2;
    ASSERT_TRUE(manager_->Submit("j", spec, false).ok());
    w_[0] = AddWorker("a", &c0_);
    w_[1] = AddWorker("b", &c1_);
    w_[2] = AddWorker("c", &c2_);
    w_[3] = AddWorker("d", &c3_);
    plan_ = *manager_->Plan("j");
    slow_ = plan_->cost;
    for (core::StageCost& c : slow_.stages) c.w *= 2;
    for (int it = 0; it < 2; ++it) Report(it, 0, 0);
    ASSERT_EQ(c0_.commands.size(), 2u);
    ASSERT_EQ(c0_.commands[1].kind, WorkerCommand::Kind::kPlanUpdate);
    update_ = c0_.commands[1];
    ASSERT_EQ(c3_.commands.back().kind, WorkerCommand::Kind::kPlanUpdate);
  }
  // Every rank's report of iteration `it`; rank 0 ran plan `version0`, the others `version`.
  void Report(int it, int version0, int version) {
    const int versions[4] = {version0, version, version, version};
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(
          manager_->IterationReport(w_[r], "j", it, ReportAt(*plan_, slow_, r, versions[r]), 1.0)
              .ok());
    }
  }
  std::vector<PlanSwitchEvent> Switches() {
    std::vector<JobEvent> events;
    EXPECT_TRUE(manager_->events().EventsAfter("j", 0, &events));
    std::vector<PlanSwitchEvent> out;
    for (const JobEvent& e : events) {
      if (e.kind == JobEvent::Kind::kPlanSwitch) out.push_back(e.plan_switch);
    }
    return out;
  }

  FakeConnection c2_, c3_;
  std::string w_[4];
  std::shared_ptr<const JobPlan> plan_;
  core::CostModel slow_;
  WorkerCommand update_;
};

TEST_F(ReplanTest, ASwitchEveryRankRanIsAppliedAndPersisted) {
  StartAndSlowDown();
  EXPECT_EQ(update_.plan->version, 1);
  EXPECT_GE(update_.switch_iteration, 4);  // at least 3 iterations after the measured one
  ASSERT_EQ(Switches().size(), 1u);
  EXPECT_EQ(Switches()[0].phase, PlanSwitchEvent::Phase::kScheduled);
  EXPECT_LT(Switches()[0].new_bubble, Switches()[0].old_bubble);
  for (int it = 2; it < update_.switch_iteration; ++it) Report(it, 0, 0);
  EXPECT_EQ(manager_->Get("j")->record.plan_version, 0);
  Report(update_.switch_iteration, 1, 1);
  const JobView job = *manager_->Get("j");
  EXPECT_EQ(job.record.plan_version, 1);
  ASSERT_EQ(job.record.plan_costs.size(), 8u);
  EXPECT_NEAR(job.record.plan_costs[0].weight_ms, 2 * plan_->cost.stages[0].w, 1e-9);
  ASSERT_EQ(Switches().size(), 2u);
  EXPECT_EQ(Switches()[1].phase, PlanSwitchEvent::Phase::kApplied);
  EXPECT_EQ(job.plan->text, update_.plan->text);
  // A restarted coordinator makes the same plan from the stored costs.
  manager_ = MakeManager();
  auto reloaded = manager_->Plan("j");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ((*reloaded)->version, 1);
  EXPECT_EQ((*reloaded)->text, update_.plan->text);
}

TEST_F(ReplanTest, ASwitchNoRankRanIsAbandoned) {
  StartAndSlowDown();
  for (int it = 2; it <= update_.switch_iteration; ++it) Report(it, 0, 0);
  EXPECT_EQ(manager_->Get("j")->record.plan_version, 0);
  ASSERT_EQ(Switches().size(), 2u);
  EXPECT_EQ(Switches()[1].phase, PlanSwitchEvent::Phase::kAbandoned);
  EXPECT_EQ((*manager_->Plan("j"))->version, 0);
}

}  // namespace
}  // namespace zpipe::coordinator
