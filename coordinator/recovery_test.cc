// Recovery on its own: restart decisions, failure grace, blame and reconciliation after a
// reload, on plain JobRecords and a WorkerRegistry with fake connections.
#include "coordinator/recovery.h"

#include <vector>

#include "coordinator/testing/fake_connection.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

RankSlot Slot(int pipeline_rank, const std::string& worker) {
  RankSlot slot;
  slot.pipeline_rank = pipeline_rank;
  slot.worker_name = worker;
  return slot;
}

// A RUNNING p = 2 job on workers a and b, in its first attempt.
JobRecord RunningJob(int max_restarts = 0) {
  JobRecord job;
  job.id = "j";
  job.spec.pipeline = 2;
  job.spec.max_restarts = max_restarts;
  job.spec.restart_backoff = "3s";
  job.state = JobState::kRunning;
  job.attempt = 1;
  job.ranks = {Slot(0, "a"), Slot(1, "b")};
  JobAttemptRecord attempt;
  attempt.attempt = 1;
  attempt.start_time = kT0;
  job.attempts.push_back(attempt);
  return job;
}

TEST(RecoveryTest, ALostRankRestartsWhileRestartsAreLeftThenFails) {
  Recovery recovery(absl::Seconds(3), absl::Seconds(30));
  JobRecord job = RunningJob(/*max_restarts=*/1);
  job.iterations_done = 4;
  Recovery::Decision d = recovery.OnRankLost(job, "worker b lost: left", kT0);
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.reason,
            "attempt 1: worker b lost: left; restart 1 of 1 in 3s, from iteration 0 (no "
            "checkpoints)");
  EXPECT_EQ(job.restarts, 1);
  EXPECT_EQ(job.attempts[0].end_reason, "worker b lost: left");
  EXPECT_EQ(job.attempts[0].end_time, kT0);
  EXPECT_EQ(job.attempts[0].iterations_done, 4);
  EXPECT_EQ(recovery.RestartReason("j"), d.reason);

  // Held back for the backoff, then due; scheduling ends the hold.
  EXPECT_TRUE(recovery.HeldBack("j", kT0 + absl::Seconds(2)));
  EXPECT_FALSE(recovery.RestartDue("j", kT0 + absl::Seconds(2)));
  EXPECT_FALSE(recovery.HeldBack("j", kT0 + absl::Seconds(3)));
  EXPECT_TRUE(recovery.RestartDue("j", kT0 + absl::Seconds(3)));
  recovery.Scheduled("j");
  EXPECT_FALSE(recovery.RestartDue("j", kT0 + absl::Seconds(3)));

  d = recovery.OnRankLost(job, "worker a failed: boom", kT0);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.reason, "worker a failed: boom (no restarts left: 1 of 1 used)");
  EXPECT_EQ(job.restarts, 1);

  JobRecord plain = RunningJob(/*max_restarts=*/0);
  d = recovery.OnRankLost(plain, "worker a failed: boom", kT0);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.reason, "worker a failed: boom");
  EXPECT_EQ(plain.attempts[0].end_time, absl::InfinitePast());  // closed by whoever fails it
}

TEST(RecoveryTest, AFailureWaitsForALostPeerThenIsItsOwnCause) {
  Recovery recovery(absl::Seconds(3), absl::Seconds(30));
  const JobRecord job = RunningJob();
  EXPECT_EQ(recovery.PendingFailure("j"), nullptr);
  EXPECT_TRUE(recovery.DeferFailure(job, "worker b failed: data", kT0));
  EXPECT_TRUE(recovery.DeferFailure(job, "worker a failed: reset", kT0 + absl::Seconds(1)));
  ASSERT_NE(recovery.PendingFailure("j"), nullptr);
  EXPECT_EQ(*recovery.PendingFailure("j"), "worker b failed: data");  // the first one
  EXPECT_EQ(recovery.DueLoss(job, kT0 + absl::Seconds(2)), std::nullopt);
  EXPECT_EQ(recovery.DueLoss(job, kT0 + absl::Seconds(3)), "worker b failed: data");
  recovery.Finished("j");
  EXPECT_EQ(recovery.PendingFailure("j"), nullptr);

  // No grace, or a job not RUNNING: lose the rank at once.
  Recovery no_grace(absl::ZeroDuration(), absl::Seconds(30));
  EXPECT_FALSE(no_grace.DeferFailure(job, "worker b failed", kT0));
  JobRecord scheduling = RunningJob();
  scheduling.state = JobState::kScheduling;
  EXPECT_FALSE(recovery.DeferFailure(scheduling, "worker b failed", kT0));
}

TEST(RecoveryTest, BlameNamesTheFirstRankWhoseWorkerIsGone) {
  WorkerRegistry workers;
  FakeConnection ca, cb;
  WorkerRegistration reg;
  reg.name = "a";
  RegisteredWorker& a = workers.Add(reg, kT0);
  reg.name = "b";
  RegisteredWorker& b = workers.Add(reg, kT0);
  ASSERT_TRUE(workers.Attach(a.info.worker_id, "", &ca, kT0).ok());
  ASSERT_TRUE(workers.Attach(b.info.worker_id, "", &cb, kT0).ok());
  WorkerRegistry::Reserve(a, "j", 0, 0);
  WorkerRegistry::Reserve(b, "j", 1, 0);
  const JobRecord job = RunningJob();
  EXPECT_EQ(Recovery::BlameLostRank(job, "a", workers), std::nullopt);
  ASSERT_NE(workers.Detach(b.info.worker_id, &cb), nullptr);
  EXPECT_EQ(Recovery::BlameLostRank(job, "a", workers),
            "worker b (pipeline rank 1, data rank 0) lost: its session closed");
  EXPECT_EQ(Recovery::BlameLostRank(job, "b", workers), std::nullopt);  // b's own report
}

TEST(RecoveryTest, ReconcileRequeuesSchedulingAndWaitsForRunningWorkers) {
  Recovery recovery(absl::Seconds(3), absl::Seconds(10));
  JobRecord scheduling = RunningJob();
  scheduling.id = "s";
  scheduling.state = JobState::kScheduling;
  EXPECT_EQ(recovery.Reconcile(scheduling, kT0),
            "coordinator restarted while scheduling; queued again");
  EXPECT_TRUE(scheduling.ranks.empty());
  EXPECT_EQ(scheduling.attempts[0].end_reason, "coordinator restarted while scheduling");

  JobRecord restarting = RunningJob();
  restarting.id = "r";
  restarting.state = JobState::kRestarting;
  restarting.reason = "attempt 1: lost; restart 1 of 2 in 3s";
  EXPECT_EQ(recovery.Reconcile(restarting, kT0), std::nullopt);
  EXPECT_TRUE(recovery.RestartDue("r", kT0));  // at once, not after another backoff
  EXPECT_EQ(recovery.RestartReason("r"), restarting.reason);

  JobRecord running = RunningJob();
  EXPECT_EQ(recovery.Reconcile(running, kT0), std::nullopt);
  recovery.Reconnected("j", 0);  // a came back, b did not
  EXPECT_EQ(recovery.DueLoss(running, kT0 + absl::Seconds(9)), std::nullopt);
  EXPECT_EQ(recovery.DueLoss(running, kT0 + absl::Seconds(10)),
            "coordinator restarted and worker b (pipeline rank 1, data rank 0) did not reconnect "
            "within 10s");
  EXPECT_EQ(recovery.DueLoss(running, kT0 + absl::Seconds(11)), std::nullopt);  // reported once

  // Every worker back, or the job dispatched again: nothing is lost.
  JobRecord other = RunningJob();
  other.id = "o";
  recovery.Reconcile(other, kT0);
  recovery.Reconnected("o", 0);
  recovery.Reconnected("o", 1);
  EXPECT_EQ(recovery.DueLoss(other, kT0 + absl::Seconds(10)), std::nullopt);
  JobRecord redispatched = RunningJob();
  redispatched.id = "d";
  recovery.Reconcile(redispatched, kT0);
  recovery.Dispatched("d");
  EXPECT_EQ(recovery.DueLoss(redispatched, kT0 + absl::Seconds(10)), std::nullopt);
}

// Issue 30: the coordinator killed, then a worker: the survivor's failure ("connection reset")
// reaches the restarted coordinator while the dead worker simply never comes back. The failure
// waits for the workers still missing; one missing at the deadline is the cause. When all come
// back, the failure is its reporter's own.
TEST(RecoveryTest, AFailureAfterARestartWaitsForTheMissingWorkersAndBlamesThem) {
  Recovery recovery(absl::Seconds(3), absl::Seconds(10));
  JobRecord job = RunningJob();
  recovery.Reconcile(job, kT0);
  recovery.Reconnected("j", 0);  // a is back, with a failure to report
  EXPECT_TRUE(recovery.AwaitingReconnect("j"));
  const std::string failed = "worker a (pipeline rank 0, data rank 0) failed: connection reset";
  EXPECT_TRUE(recovery.DeferFailure(job, failed, kT0 + absl::Seconds(1)));
  // Past the failure grace, still within the recovery grace: b may yet come back.
  EXPECT_EQ(recovery.DueLoss(job, kT0 + absl::Seconds(5)), std::nullopt);
  EXPECT_EQ(recovery.DueLoss(job, kT0 + absl::Seconds(10)),
            "coordinator restarted and worker b (pipeline rank 1, data rank 0) did not reconnect "
            "within 10s; then " + failed);

  JobRecord both = RunningJob();
  both.id = "both";
  recovery.Reconcile(both, kT0);
  recovery.Reconnected("both", 0);
  EXPECT_TRUE(recovery.DeferFailure(both, failed, kT0 + absl::Seconds(1)));
  recovery.Reconnected("both", 1);  // b is back too: the failure is a's own
  EXPECT_EQ(recovery.DueLoss(both, kT0 + absl::Seconds(2)), failed);
  EXPECT_FALSE(recovery.AwaitingReconnect("both"));
}

}  // namespace
}  // namespace zpipe::coordinator
