// SqliteJobStore: a job's record and its events are written together, all or nothing, and the
// store keeps each job's last kStoredEvents events.
#include "coordinator/sqlite_job_store.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

JobRecord Job(const std::string& id, uint64_t last_sequence) {
  JobRecord job;
  job.id = id;
  job.state = JobState::kRunning;
  job.last_sequence = last_sequence;
  return job;
}

JobEvent Iteration(uint64_t sequence) {
  JobEvent e;
  e.sequence = sequence;
  e.time = absl::FromUnixSeconds(1'700'000'000 + static_cast<int64_t>(sequence));
  e.kind = JobEvent::Kind::kIteration;
  e.summary.iteration = static_cast<int>(sequence);
  e.summary.loss = 2.5;
  return e;
}

std::vector<uint64_t> Sequences(const std::vector<JobEvent>& events) {
  std::vector<uint64_t> out;
  for (const JobEvent& e : events) out.push_back(e.sequence);
  return out;
}

TEST(SqliteJobStoreTest, EventsOfEveryKindComeBackAsTheyWereWritten) {
  std::unique_ptr<SqliteJobStore> store = std::move(*SqliteJobStore::Open(":memory:"));
  JobEvent change;
  change.sequence = 1;
  change.time = absl::FromUnixSeconds(1'700'000'000);
  change.kind = JobEvent::Kind::kStateChange;
  change.from = JobState::kPending;
  change.to = JobState::kRunning;
  change.reason = "scheduled on a, b";
  JobEvent plan_switch;
  plan_switch.sequence = 3;
  plan_switch.kind = JobEvent::Kind::kPlanSwitch;
  plan_switch.plan_switch.phase = PlanSwitchEvent::Phase::kApplied;
  plan_switch.plan_switch.to_version = 2;
  plan_switch.plan_switch.new_bubble = 0.125;
  plan_switch.reason = "W 2.0x the planned cost";
  const std::vector<JobEvent> written = {change, Iteration(2), plan_switch};
  ASSERT_TRUE(store->Put(Job("j", 3), written).ok());

  absl::StatusOr<std::vector<JobEvent>> read = store->LoadEvents("j");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].kind, JobEvent::Kind::kStateChange);
  EXPECT_EQ((*read)[0].to, JobState::kRunning);
  EXPECT_EQ((*read)[0].reason, "scheduled on a, b");
  EXPECT_EQ((*read)[0].time, change.time);
  EXPECT_EQ((*read)[1].kind, JobEvent::Kind::kIteration);
  EXPECT_EQ((*read)[1].summary.iteration, 2);
  EXPECT_EQ((*read)[1].summary.loss, 2.5);
  EXPECT_EQ((*read)[2].kind, JobEvent::Kind::kPlanSwitch);
  EXPECT_EQ((*read)[2].plan_switch.phase, PlanSwitchEvent::Phase::kApplied);
  EXPECT_EQ((*read)[2].plan_switch.to_version, 2);
  EXPECT_EQ((*read)[2].plan_switch.new_bubble, 0.125);
  EXPECT_EQ((*read)[2].reason, "W 2.0x the planned cost");
  EXPECT_TRUE(store->LoadEvents("other")->empty());
}

TEST(SqliteJobStoreTest, KeepsEachJobsLastEventsAndDeletesThemWithTheJob) {
  std::unique_ptr<SqliteJobStore> store = std::move(*SqliteJobStore::Open(":memory:"));
  const uint64_t total = JobStore::kStoredEvents + 40;
  for (uint64_t seq = 1; seq <= total; ++seq) {
    const JobEvent e = Iteration(seq);
    ASSERT_TRUE(store->Put(Job("j", seq), {&e, 1}).ok());
  }
  const JobEvent other = Iteration(1);
  ASSERT_TRUE(store->Put(Job("k", 1), {&other, 1}).ok());
  std::vector<JobEvent> kept = *store->LoadEvents("j");
  ASSERT_EQ(kept.size(), JobStore::kStoredEvents);
  EXPECT_EQ(kept.front().sequence, total - JobStore::kStoredEvents + 1);
  EXPECT_EQ(kept.back().sequence, total);

  ASSERT_TRUE(store->Delete("j").ok());
  EXPECT_TRUE(store->LoadEvents("j")->empty());
  EXPECT_EQ(Sequences(*store->LoadEvents("k")), std::vector<uint64_t>{1});
}

// A write the full disk refuses leaves record and events as they were: never a record whose
// last_sequence is ahead of its stored events.
TEST(SqliteJobStoreTest, AWriteTheFullDiskRefusesChangesNeitherRecordNorEvents) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("zpipe_sqlite_store_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
        "_" + std::to_string(reinterpret_cast<uintptr_t>(&path)) + ".db"))
          .string();
  std::filesystem::remove(path);
  {
    std::unique_ptr<SqliteJobStore> store = std::move(*SqliteJobStore::Open(path));
    const JobEvent first = Iteration(1);
    ASSERT_TRUE(store->Put(Job("j", 1), {&first, 1}).ok());
    ASSERT_TRUE(store->SetMaxPagesForTest(1).ok());  // no page to spare
    std::vector<JobEvent> many;
    JobRecord big = Job("j", 200);
    big.reason = std::string(64 * 1024, 'x');
    for (uint64_t seq = 2; seq <= 200; ++seq) many.push_back(Iteration(seq));
    absl::Status st = store->Put(big, many);
    EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  }
  std::unique_ptr<SqliteJobStore> reopened = std::move(*SqliteJobStore::Open(path));
  std::vector<JobRecord> jobs = *reopened->LoadAll();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].last_sequence, 1u);
  EXPECT_EQ(Sequences(*reopened->LoadEvents("j")), std::vector<uint64_t>{1});
  reopened.reset();
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
}

}  // namespace
}  // namespace zpipe::coordinator
