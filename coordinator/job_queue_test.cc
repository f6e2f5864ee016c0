// JobQueue on its own: records by id and submission order, paging, queue positions, and the
// FIFO-per-device-kind order in which Schedule offers waiting jobs.
#include "coordinator/job_queue.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

JobRecord Job(JobQueue& queue, const std::string& id, JobState state,
              DeviceKind device = DeviceKind::kCpu) {
  JobRecord job;
  job.id = id;
  job.state = state;
  job.spec.device = device;
  job.submit_order = queue.NextSubmitOrder();
  return job;
}

TEST(JobQueueTest, FindsJobsAndHandsOutOrdersAfterRestoredOnes) {
  JobQueue queue;
  JobRecord restored;
  restored.id = "old";
  restored.submit_order = 41;
  queue.Add(restored);
  EXPECT_EQ(queue.NextSubmitOrder(), 42);
  queue.Add(Job(queue, "new", JobState::kPending));
  ASSERT_NE(queue.Find("new"), nullptr);
  EXPECT_EQ(queue.Find("new")->submit_order, 43);
  EXPECT_EQ(queue.Find("missing"), nullptr);
  const JobQueue& view = queue;
  EXPECT_EQ(view.Find("old")->id, "old");
  EXPECT_EQ(queue.all().begin()->second.id, "old");  // oldest first
}

TEST(JobQueueTest, PagesFilterByStateAndSayWhetherMoreFollow) {
  JobQueue queue;
  for (const char* id : {"a", "b", "c", "d"}) {
    queue.Add(Job(queue, id, id[0] == 'b' ? JobState::kFailed : JobState::kPending));
  }
  bool more = false;
  std::vector<const JobRecord*> page = queue.Page({}, 0, 2, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[1]->id, "b");
  EXPECT_TRUE(more);
  page = queue.Page({.states = {JobState::kPending}}, page[1]->submit_order, 2, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0]->id, "c");
  EXPECT_FALSE(more);  // exactly a page left: no empty next page
  page = queue.Page({.states = {JobState::kFailed}}, 0, 10, &more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0]->id, "b");
}

// Labels (every selected one, with its value) and the creation time filter before paging: a page
// is full of matches, however many jobs between them do not match.
TEST(JobQueueTest, PagesFilterByLabelsAndCreationTimeBeforePaging) {
  JobQueue queue;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 6; ++i) {
    JobRecord job = Job(queue, absl::StrCat("j", i), JobState::kPending);
    job.create_time = t0 + absl::Minutes(i);
    job.spec.labels["team"] = i % 2 == 0 ? "nlp" : "vision";
    if (i >= 4) job.spec.labels["size"] = "big";
    queue.Add(std::move(job));
  }
  bool more = false;
  std::vector<const JobRecord*> page = queue.Page({.labels = {{"team", "nlp"}}}, 0, 2, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0]->id, "j0");
  EXPECT_EQ(page[1]->id, "j2");
  EXPECT_TRUE(more);
  page = queue.Page({.labels = {{"team", "nlp"}}}, page[1]->submit_order, 2, &more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0]->id, "j4");
  EXPECT_FALSE(more);
  // Several labels: all of them (AND); an unknown label or value matches nothing.
  page = queue.Page({.labels = {{"team", "nlp"}, {"size", "big"}}}, 0, 10, &more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0]->id, "j4");
  EXPECT_TRUE(queue.Page({.labels = {{"team", "audio"}}}, 0, 10, &more).empty());
  EXPECT_TRUE(queue.Page({.labels = {{"owner", "nlp"}}}, 0, 10, &more).empty());
  // Created at or after.
  page = queue.Page({.created_after = t0 + absl::Minutes(3)}, 0, 10, &more);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0]->id, "j3");
  page = queue.Page({.labels = {{"team", "vision"}}, .created_after = t0 + absl::Minutes(2)}, 0,
                    10, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0]->id, "j3");
  EXPECT_EQ(page[1]->id, "j5");
}

TEST(JobQueueTest, CountsAndQueuePositionsArePerDeviceKind) {
  JobQueue queue;
  queue.Add(Job(queue, "c1", JobState::kPending));
  queue.Add(Job(queue, "g1", JobState::kPending, DeviceKind::kCuda));
  queue.Add(Job(queue, "r", JobState::kRunning));
  JobRecord& c2 = queue.Add(Job(queue, "c2", JobState::kPending));
  EXPECT_EQ(queue.PendingCount(), 3);
  EXPECT_EQ(queue.QueuePosition(c2), 1);
  EXPECT_EQ(queue.QueuePosition(*queue.Find("g1")), 0);
  const auto counts = queue.CountByState();
  EXPECT_EQ(counts[static_cast<int>(JobState::kPending)], 3);
  EXPECT_EQ(counts[static_cast<int>(JobState::kRunning)], 1);
}

TEST(JobQueueTest, ScheduleOffersWaitingJobsFifoPerDeviceKind) {
  JobQueue queue;
  queue.Add(Job(queue, "done", JobState::kSucceeded));
  queue.Add(Job(queue, "big", JobState::kPending));
  queue.Add(Job(queue, "gpu", JobState::kPending, DeviceKind::kCuda));
  queue.Add(Job(queue, "small", JobState::kPending));
  queue.Add(Job(queue, "again", JobState::kRestarting, DeviceKind::kCuda));
  std::vector<std::string> offered;
  queue.Schedule([&](JobRecord& job) {
    offered.push_back(job.id);
    if (job.id == "big") return false;  // waits: "small" waits behind it
    job.state = JobState::kRunning;
    return true;
  });
  EXPECT_EQ(offered, (std::vector<std::string>{"big", "gpu", "again"}));
  EXPECT_EQ(queue.Find("gpu")->state, JobState::kRunning);
  EXPECT_EQ(queue.Find("small")->state, JobState::kPending);

  offered.clear();
  queue.Schedule([&](JobRecord& job) {
    offered.push_back(job.id);
    return true;
  });
  EXPECT_EQ(offered, (std::vector<std::string>{"big", "small"}));
}

TEST(JobQueueTest, ActiveRankOfFindsOnlySchedulingOrRunningJobs) {
  JobQueue queue;
  RankSlot slot;
  slot.pipeline_rank = 1;
  slot.worker_name = "w";
  JobRecord old = Job(queue, "old", JobState::kFailed);
  old.ranks = {slot};
  queue.Add(old);
  EXPECT_EQ(queue.ActiveRankOf("w").first, nullptr);
  JobRecord running = Job(queue, "run", JobState::kRunning);
  running.ranks = {RankSlot{}, slot};
  queue.Add(running);
  auto [job, held] = queue.ActiveRankOf("w");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->id, "run");
  EXPECT_EQ(held->pipeline_rank, 1);
  EXPECT_EQ(queue.ActiveRankOf("nobody").second, nullptr);
}

}  // namespace
}  // namespace zpipe::coordinator
