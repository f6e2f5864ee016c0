#include "worker/daemon/job_log.h"

#include <gtest/gtest.h>

#include <string>

namespace zpipe::worker {
namespace {

const absl::Time kTime = absl::FromUnixMillis(1'700'000'000'250);

TEST(JobLogTest, KeepsLinesWrittenWhileAJobRunsWithTheirRankAndTime) {
  JobLog log(100);
  log.Write(kTime, "before any job");
  EXPECT_FALSE(log.Take().has_value());
  log.Begin("job1", 2, 1);
  log.Write(kTime, "first\nsecond");
  log.End();
  log.Write(kTime, "after the job");
  std::optional<JobLogBatch> b = log.Take();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->job_id, "job1");
  EXPECT_EQ(b->pipeline_rank, 2);
  EXPECT_EQ(b->data_rank, 1);
  ASSERT_EQ(b->lines.size(), 2u);
  EXPECT_EQ(b->lines[0].text, "first");
  EXPECT_EQ(b->lines[1].text, "second");
  EXPECT_EQ(b->lines[0].time, kTime);
  EXPECT_FALSE(log.Take().has_value()) << "taken lines are gone";
}

TEST(JobLogTest, BoundKeepsTheNewestLinesAndCountsTheRest) {
  JobLog log(3);
  log.Begin("j", 0, 0);
  for (int i = 0; i < 10; ++i) log.Write(kTime, "line " + std::to_string(i));
  std::optional<JobLogBatch> b = log.Take();
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->lines.size(), 3u);
  EXPECT_EQ(b->lines[0].text, "line 7");
  EXPECT_EQ(b->dropped_lines, 7u);
  log.Write(kTime, "next");
  b = log.Take();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->dropped_lines, 0u) << "counted once";
}

TEST(JobLogTest, CleansLinesSoTheyAlwaysSerialize) {
  EXPECT_EQ(CleanLogLine("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(CleanLogLine("bad \xff\xc3 end"), "bad ?? end");
  const std::string cut = CleanLogLine(std::string(10000, 'x'));
  EXPECT_EQ(cut.size(), kMaxLogLineBytes);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  JobLog log(10);
  log.Begin("j", 0, 0);
  log.Write(kTime, "\xfe\xfe");
  EXPECT_EQ(log.Take()->lines[0].text, "??");  // job_proto_test sends it through the wire
}

}  // namespace
}  // namespace zpipe::worker
