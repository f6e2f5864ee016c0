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
  absl::Status Put(const JobRecord& job) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    jobs[job.id] = job;
    return absl::OkStatus();
  }
  absl::Status Delete(const std::string& job_id) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    jobs.erase(job_id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override { return std::vector<JobRecord>(); }
  bool full = false;
  std::map<std::string, JobRecord> jobs;
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
  JobStoreWriter writer(store, metrics);
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

TEST(JobStoreWriterTest, OtherErrorsAreUnavailableAndForgottenJobsAreDropped) {
  class BrokenStore : public MemoryStore {
   public:
    absl::Status Put(const JobRecord&) override { return absl::InternalError("disk I/O error"); }
  } store;
  NullMetrics metrics;
  JobStoreWriter writer(store, metrics);
  EXPECT_FALSE(writer.Put(Job("gone")).ok());
  EXPECT_TRUE(absl::IsUnavailable(writer.Status())) << writer.Status();
  EXPECT_TRUE(
      writer.RetryUnsaved([](const std::string&) -> const JobRecord* { return nullptr; }).ok());
  EXPECT_FALSE(writer.HasUnsaved());
}

TEST(JobStoreWriterTest, ANewJobsRefusedWriteIsNotKept) {
  MemoryStore store;
  CountingMetrics metrics;
  JobStoreWriter writer(store, metrics);
  store.full = true;
  EXPECT_TRUE(absl::IsResourceExhausted(writer.PutNew(Job("new"))));
  EXPECT_EQ(metrics.write_errors, 1);
  EXPECT_FALSE(writer.HasUnsaved());
  EXPECT_TRUE(writer.Status().ok());
}

}  // namespace
}  // namespace zpipe::coordinator
