#include "worker/daemon/report_outbox.h"

#include <gtest/gtest.h>

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
