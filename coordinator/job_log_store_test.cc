#include "coordinator/job_log_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "absl/time/clock.h"

namespace zpipe::coordinator {
namespace {

std::vector<std::pair<absl::Time, std::string>> Lines(const std::string& prefix, int first,
                                                      int count) {
  std::vector<std::pair<absl::Time, std::string>> out;
  for (int i = first; i < first + count; ++i) {
    out.emplace_back(absl::FromUnixSeconds(1000 + i), prefix + std::to_string(i));
  }
  return out;
}

std::vector<std::string> Texts(const LogRead& read) {
  std::vector<std::string> out;
  for (const LogLineData& line : read.lines) out.push_back(line.text);
  return out;
}

TEST(JobLogStoreTest, KeepsLinesPerRankInArrivalOrderAndFilters) {
  JobLogStore store(100);
  store.Append("j", 0, 0, Lines("a", 0, 2), 0);
  store.Append("j", 1, 0, Lines("b", 0, 1), 0);
  store.Append("j", 0, 0, Lines("a", 2, 1), 0);
  LogRead all = store.Read("j", {});
  EXPECT_EQ(Texts(all), (std::vector<std::string>{"a0", "a1", "b0", "a2"}));
  EXPECT_EQ(all.last_sequence, all.lines.back().sequence);
  EXPECT_EQ(all.lines[2].pipeline_rank, 1);

  LogQuery rank1;
  rank1.rank = std::make_pair(1, 0);
  EXPECT_EQ(Texts(store.Read("j", rank1)), (std::vector<std::string>{"b0"}));
  LogQuery tail;
  tail.tail = 2;
  EXPECT_EQ(Texts(store.Read("j", tail)), (std::vector<std::string>{"b0", "a2"}));
  LogQuery after;
  after.after_sequence = all.lines[2].sequence;
  EXPECT_EQ(Texts(store.Read("j", after)), (std::vector<std::string>{"a2"}));
  LogQuery since;
  since.since = absl::FromUnixSeconds(1001);
  EXPECT_EQ(Texts(store.Read("j", since)), (std::vector<std::string>{"a1", "a2"}));
  EXPECT_TRUE(store.Read("other", {}).lines.empty());
}

TEST(JobLogStoreTest, JobLinesInterleaveWithEveryRankButNotWithOneRank) {
  JobLogStore store(100);
  store.Append("j", 0, 0, Lines("a", 0, 1), 0);
  store.AppendJobLine("j", absl::FromUnixSeconds(2000), "iteration 0: loss 1.0000");
  store.Append("j", 1, 0, Lines("b", 0, 1), 0);
  LogRead all = store.Read("j", {});
  ASSERT_EQ(Texts(all), (std::vector<std::string>{"a0", "iteration 0: loss 1.0000", "b0"}));
  EXPECT_EQ(all.lines[1].pipeline_rank, JobLogStore::kJobRank);
  EXPECT_EQ(GlobalRank(all.lines[1], 2), -1);
  EXPECT_EQ(GlobalRank(all.lines[2], 2), 1);
  LogQuery rank0;
  rank0.rank = std::make_pair(0, 0);
  EXPECT_EQ(Texts(store.Read("j", rank0)), (std::vector<std::string>{"a0"}));
}

TEST(JobLogStoreTest, BoundDropsTheOldestLinesOfARankAndCountsThem) {
  JobLogStore store(3);
  store.Append("j", 0, 0, Lines("a", 0, 5), /*dropped_by_worker=*/4);
  store.Append("j", 1, 0, Lines("b", 0, 1), 0);
  LogRead read = store.Read("j", {});
  EXPECT_EQ(Texts(read), (std::vector<std::string>{"a2", "a3", "a4", "b0"}));
  EXPECT_EQ(read.dropped, 6u) << "4 on the worker, 2 here";
  LogQuery rank1;
  rank1.rank = std::make_pair(1, 0);
  EXPECT_EQ(store.Read("j", rank1).dropped, 0u);
}

TEST(JobLogStoreTest, KeepsOnlyTheMostRecentJobs) {
  JobLogStore store(10, /*max_jobs=*/2);
  store.Append("j1", 0, 0, Lines("x", 0, 1), 0);
  store.Append("j2", 0, 0, Lines("x", 0, 1), 0);
  store.Append("j1", 0, 0, Lines("x", 1, 1), 0);  // j1 is now the more recent
  store.Append("j3", 0, 0, Lines("x", 0, 1), 0);
  EXPECT_EQ(store.Read("j1", {}).lines.size(), 2u);
  EXPECT_TRUE(store.Read("j2", {}).lines.empty());
  EXPECT_EQ(store.Read("j3", {}).lines.size(), 1u);
}

TEST(JobLogStoreTest, SequencesOfANewStoreFollowThoseOfAnEarlierOne) {
  // A coordinator restart: the new store's lines come after every line the old one numbered.
  auto old_store = std::make_unique<JobLogStore>(10);
  old_store->Append("j", 0, 0, Lines("x", 0, 500), 0);
  const uint64_t old_last = old_store->Read("j", {}).last_sequence;
  old_store.reset();
  absl::SleepFor(absl::Milliseconds(2));
  JobLogStore new_store(10);
  new_store.Append("j", 0, 0, Lines("y", 0, 1), 0);
  LogQuery after;
  after.after_sequence = old_last;
  EXPECT_EQ(Texts(new_store.Read("j", after)), (std::vector<std::string>{"y0"}));
}

TEST(JobLogStoreTest, IgnoresRanksOutOfBounds) {
  JobLogStore store(10);
  store.Append("j", -1, 0, Lines("x", 0, 1), 0);
  store.Append("j", 0, JobLogStore::kMaxRank, Lines("x", 0, 1), 0);
  EXPECT_TRUE(store.Read("j", {}).lines.empty());
}

TEST(JobLogStoreTest, WaitWakesOnANewLineAndOnClose) {
  JobLogStore store(10);
  EXPECT_FALSE(store.WaitForLinesAfter("j", 0, absl::Now() + absl::Milliseconds(20)));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Append("j", 0, 0, Lines("x", 0, 1), 0);
  });
  EXPECT_TRUE(store.WaitForLinesAfter("j", 0, absl::Now() + absl::Seconds(30)));
  writer.join();
  const uint64_t last = store.Read("j", {}).last_sequence;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Close();
  });
  const absl::Time start = absl::Now();
  EXPECT_FALSE(store.WaitForLinesAfter("j", last, absl::Now() + absl::Seconds(30)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  closer.join();
}

}  // namespace
}  // namespace zpipe::coordinator
