#include "worker/daemon/report_outbox.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zpipe::worker {
namespace {

zpipe::v1::WorkerMessage Iteration(const std::string& job, int iteration) {
  zpipe::v1::WorkerMessage m;
  m.mutable_iteration()->set_job_id(job);
  m.mutable_iteration()->set_iteration(iteration);
  return m;
}

zpipe::v1::WorkerMessage Progress(const std::string& job, int events) {
  zpipe::v1::WorkerMessage m;
  m.mutable_progress()->set_job_id(job);
  for (int i = 0; i < events; ++i) m.mutable_progress()->add_ops(zpipe::v1::COMPUTE_OP_F);
  return m;
}

zpipe::v1::WorkerMessage LogBatch(const std::string& job, int first, int count) {
  zpipe::v1::WorkerMessage m;
  m.mutable_log()->set_job_id(job);
  for (int i = first; i < first + count; ++i) {
    m.mutable_log()->add_lines()->set_text("line " + std::to_string(i));
  }
  return m;
}

TEST(ReportOutboxTest, KeepsTheNewestLogLinesAndCountsTheOthers) {
  ReportOutbox box(1 << 20, /*max_log_lines=*/5);
  box.Push(LogBatch("j", 0, 3));
  box.Push(Iteration("j", 0));
  box.Push(LogBatch("j", 3, 4));  // 7 lines: the oldest 2 go
  EXPECT_EQ(box.log_lines(), 5u);
  ASSERT_EQ(box.size(), 3u);
  ASSERT_TRUE(box.front().has_log());
  ASSERT_EQ(box.front().log().lines_size(), 1);
  EXPECT_EQ(box.front().log().lines(0).text(), "line 2");
  EXPECT_EQ(box.front().log().dropped_lines(), 2u);
  box.Push(LogBatch("j", 7, 2));  // the first batch goes whole; its count moves on
  EXPECT_EQ(box.log_lines(), 5u);
  ASSERT_EQ(box.size(), 3u);
  EXPECT_TRUE(box.front().has_iteration());
  box.PopFront();
  ASSERT_TRUE(box.front().has_log());
  EXPECT_EQ(box.front().log().lines(0).text(), "line 4");
  EXPECT_EQ(box.front().log().dropped_lines(), 4u);  // lines 0..3
  while (!box.empty()) box.PopFront();
  EXPECT_EQ(box.bytes(), 0u) << "byte count kept exact through the trims";
  EXPECT_EQ(box.log_lines(), 0u);
}

TEST(ReportOutboxTest, DropsLogBatchesBeforeReportsForRoom) {
  // Room for the iteration and one batch, not two.
  const size_t batch = LogBatch("j", 20, 20).ByteSizeLong();
  ReportOutbox box(batch + Iteration("j", 0).ByteSizeLong() + 8);
  box.Push(LogBatch("j", 0, 20));
  box.Push(Iteration("j", 0));
  box.Push(LogBatch("j", 20, 20));
  ASSERT_EQ(box.size(), 2u);
  EXPECT_TRUE(box.front().has_iteration());
  box.PopFront();
  EXPECT_EQ(box.front().log().lines(0).text(), "line 20");
  EXPECT_EQ(box.front().log().dropped_lines(), 20u);
  EXPECT_EQ(box.TakeDropped(), 1u);
}

TEST(ReportOutboxTest, KeepsReportsInOrderAndIgnoresMessagesOfTheMoment) {
  ReportOutbox box(1 << 20);
  zpipe::v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat()->set_job_id("j");
  box.Push(heartbeat);
  box.Push(Iteration("j", 0));
  box.Push(Progress("j", 3));
  box.Push(Iteration("j", 1));
  ASSERT_EQ(box.size(), 3u);
  EXPECT_EQ(box.front().iteration().iteration(), 0);
  box.PopFront();
  EXPECT_TRUE(box.front().has_progress());
  box.PopFront();
  EXPECT_EQ(box.front().iteration().iteration(), 1);
  box.PopFront();
  EXPECT_TRUE(box.empty());
  EXPECT_EQ(box.bytes(), 0u);
}

TEST(ReportOutboxTest, PrependPutsReportsWrittenToAnEndedSessionFirstInTheirOrder) {
  ReportOutbox box(1 << 20);
  box.Push(Iteration("j", 7));
  std::vector<zpipe::v1::WorkerMessage> again = {Iteration("j", 5), Iteration("j", 6)};
  box.Prepend(std::move(again));
  ASSERT_EQ(box.size(), 3u);
  for (int expected : {5, 6, 7}) {
    EXPECT_EQ(box.front().iteration().iteration(), expected);
    box.PopFront();
  }
  EXPECT_EQ(box.bytes(), 0u);
}

TEST(ReportOutboxTest, WhenFullDropsTheOldestProgressFirstThenTheOldestReport) {
  // Iterations 1..9 serialize to the same size (0 would not be written at all).
  const size_t report = Iteration("j", 1).ByteSizeLong();
  const size_t progress = Progress("j", 100).ByteSizeLong();
  ReportOutbox box(3 * report + progress);
  box.Push(Iteration("j", 1));
  box.Push(Progress("j", 100));
  box.Push(Iteration("j", 2));
  box.Push(Iteration("j", 3));
  EXPECT_EQ(box.TakeDropped(), 0u);
  box.Push(Iteration("j", 4));  // no room: the progress batch goes, not a report
  EXPECT_EQ(box.TakeDropped(), 1u);
  ASSERT_EQ(box.size(), 4u);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(box.front().iteration().iteration(), i);
    box.PopFront();
  }
  ReportOutbox reports_only(2 * report);
  for (int i = 1; i <= 3; ++i) reports_only.Push(Iteration("j", i));
  EXPECT_EQ(reports_only.TakeDropped(), 1u);
  EXPECT_EQ(reports_only.front().iteration().iteration(), 2) << "the oldest report goes";
  EXPECT_LE(reports_only.bytes(), 2 * report);
}

TEST(ReportOutboxTest, RetainJobKeepsOnlyThatJobsReports) {
  ReportOutbox box(1 << 20);
  box.Push(Iteration("old", 0));
  box.Push(Iteration("j", 0));
  zpipe::v1::WorkerMessage finished;
  finished.mutable_finished()->set_job_id("j");
  box.Push(finished);
  EXPECT_TRUE(box.HasFinished("j"));
  EXPECT_FALSE(box.HasFinished("old"));
  EXPECT_EQ(box.RetainJob("j"), 1u);
  ASSERT_EQ(box.size(), 2u);
  EXPECT_EQ(box.front().iteration().job_id(), "j");
  EXPECT_EQ(box.RetainJob(""), 2u);
  EXPECT_TRUE(box.empty());
  EXPECT_EQ(box.bytes(), 0u);
}

}  // namespace
}  // namespace zpipe::worker
