// JobStoreWriter on its own: a refused write is kept as unsaved and retried until the store takes
// it, Status() says so meanwhile, and a new job's refused write is not kept.
#include "coordinator/job_store_writer.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

// Keeps records in memory; refuses every write while `full`.
class MemoryStore : public JobStore {
 public:
  absl::Status Put(const JobRecord& job, absl::Span<const JobEvent> written) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    jobs[job.id] = job;
    for (const JobEvent& e : written) events[job.id][e.sequence] = e;
    return absl::OkStatus();
  }
  absl::Status Delete(const std::string& job_id) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    jobs.erase(job_id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override { return std::vector<JobRecord>(); }
  absl::StatusOr<std::vector<JobEvent>> LoadEvents(const std::string& job_id) override {
    std::vector<JobEvent> out;
    for (const auto& [sequence, e] : events[job_id]) out.push_back(e);
    return out;
  }
  bool full = false;
  std::map<std::string, JobRecord> jobs;
  std::map<std::string, std::map<uint64_t, JobEvent>> events;
};

class CountingMetrics : public NullMetrics {
 public:
  void CountStoreWriteError() override { ++write_errors; }
  void SetStoreUnsavedJobs(int64_t count) override { unsaved = count; }
  int write_errors = 0;
  int64_t unsaved = -1;
};

JobRecord Job(const std::string& id, JobState state = JobState::kPending) {
  JobRecord job;
  job.id = id;
  job.state = state;
  return job;
}

TEST(JobStoreWriterTest, ARefusedWriteIsKeptAndRetriedUntilTheStoreTakesIt) {
  MemoryStore store;
  CountingMetrics metrics;
  JobEventLog log;
  JobStoreWriter writer(store, log, metrics);
  ASSERT_TRUE(writer.Put(Job("a")).ok());
  EXPECT_TRUE(writer.Status().ok());
  EXPECT_EQ(metrics.unsaved, 0);

  store.full = true;
  JobRecord a = Job("a", JobState::kCancelled);
  EXPECT_TRUE(absl::IsResourceExhausted(writer.Put(a)));
  EXPECT_TRUE(writer.HasUnsaved());
  EXPECT_TRUE(writer.IsUnsaved("a"));
  EXPECT_EQ(metrics.write_errors, 1);
  EXPECT_EQ(metrics.unsaved, 1);
  const absl::Status status = writer.Status();
  EXPECT_TRUE(absl::IsResourceExhausted(status));
  EXPECT_NE(status.message().find("1 job's latest change waits to be written"), std::string::npos)
      << status;
  EXPECT_EQ(store.jobs["a"].state, JobState::kPending);  // the store still has the old one

  auto find = [&](const std::string& id) -> const JobRecord* { return id == "a" ? &a : nullptr; };
  EXPECT_FALSE(writer.RetryUnsaved(find).ok());  // still full
  store.full = false;
  EXPECT_TRUE(writer.RetryUnsaved(find).ok());
  EXPECT_FALSE(writer.HasUnsaved());
  EXPECT_TRUE(writer.Status().ok());
  EXPECT_EQ(metrics.unsaved, 0);
  EXPECT_EQ(store.jobs["a"].state, JobState::kCancelled);
}

JobEvent Event(uint64_t sequence) {
  JobEvent e;
  e.sequence = sequence;
  e.kind = JobEvent::Kind::kIteration;
  e.summary.iteration = static_cast<int>(sequence);
  return e;
}

// A job's events go to the store with its record; the ones of a refused write go with the retry.
TEST(JobStoreWriterTest, EventsGoWithTheRecordAndARefusedWritesEventsWithItsRetry) {
  MemoryStore store;
  CountingMetrics metrics;
  JobEventLog log;
  JobStoreWriter writer(store, log, metrics);
  JobRecord a = Job("a", JobState::kRunning);
  log.Open("a", 0);
  for (uint64_t seq = 1; seq <= 2; ++seq) log.Append("a", Event(seq));
  a.last_sequence = 2;
  ASSERT_TRUE(writer.Put(a).ok());
  EXPECT_EQ(store.events["a"].size(), 2u);

  store.full = true;
  log.Append("a", Event(3));
  a.last_sequence = 3;
  EXPECT_FALSE(writer.Put(a).ok());
  log.Append("a", Event(4));
  a.last_sequence = 4;
  EXPECT_FALSE(writer.Put(a).ok());
  EXPECT_EQ(store.events["a"].size(), 2u);

  store.full = false;
  EXPECT_TRUE(writer.RetryUnsaved([&](const std::string&) { return &a; }).ok());
  std::vector<JobEvent> stored = *store.LoadEvents("a");
  ASSERT_EQ(stored.size(), 4u);
  EXPECT_EQ(stored[2].summary.iteration, 3);
  EXPECT_EQ(stored[3].summary.iteration, 4);
}

TEST(JobStoreWriterTest, OtherErrorsAreUnavailableAndForgottenJobsAreDropped) {
  class BrokenStore : public MemoryStore {
   public:
    absl::Status Put(const JobRecord&, absl::Span<const JobEvent>) override {
      return absl::InternalError("disk I/O error");
    }
  } store;
  NullMetrics metrics;
  JobEventLog log;
  JobStoreWriter writer(store, log, metrics);
  EXPECT_FALSE(writer.Put(Job("gone")).ok());
  EXPECT_TRUE(absl::IsUnavailable(writer.Status())) << writer.Status();
  EXPECT_TRUE(
      writer.RetryUnsaved([](const std::string&) -> const JobRecord* { return nullptr; }).ok());
  EXPECT_FALSE(writer.HasUnsaved());
}

TEST(JobStoreWriterTest, ANewJobsRefusedWriteIsNotKept) {
  MemoryStore store;
  CountingMetrics metrics;
  JobEventLog log;
  JobStoreWriter writer(store, log, metrics);
  store.full = true;
  EXPECT_TRUE(absl::IsResourceExhausted(writer.PutNew(Job("new"))));
  EXPECT_EQ(metrics.write_errors, 1);
  EXPECT_FALSE(writer.HasUnsaved());
  EXPECT_TRUE(writer.Status().ok());
}

}  // namespace
}  // namespace zpipe::coordinator
