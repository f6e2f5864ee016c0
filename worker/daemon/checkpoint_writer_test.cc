// CheckpointWriter: one write in flight, Start waits for the previous one and hands back its
// result, each result is delivered once, and an exception in a write is a status.
#include "worker/daemon/checkpoint_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "absl/synchronization/notification.h"

namespace zpipe::worker {
namespace {

TEST(CheckpointWriterTest, RunsInTheBackgroundAndDeliversTheResultOnce) {
  CheckpointWriter writer;
  EXPECT_FALSE(writer.busy());
  EXPECT_FALSE(writer.Poll().has_value());
  EXPECT_TRUE(writer.Wait().ok());

  absl::Notification release;
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> other_thread{false};
  CheckpointWriter::Started s = writer.Start([&] {
    other_thread = std::this_thread::get_id() != caller;
    release.WaitForNotification();
    return absl::ResourceExhaustedError("disk full");
  });
  EXPECT_TRUE(s.previous.ok());
  EXPECT_TRUE(writer.busy());
  EXPECT_FALSE(writer.Poll().has_value()) << "still running: Poll does not wait";
  release.Notify();
  std::optional<absl::Status> done;
  for (int i = 0; i < 1000 && !done; ++i) {
    done = writer.Poll();
    if (!done) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(other_thread);
  EXPECT_FALSE(writer.busy());
  EXPECT_TRUE(writer.Wait().ok()) << "delivered once";
}

TEST(CheckpointWriterTest, StartWaitsForTheWriteInFlightAndReturnsItsResult) {
  CheckpointWriter writer;
  std::atomic<int> running{0}, most{0};
  auto task = [&](absl::Status result) {
    return [&, result] {
      const int now = ++running;
      most = std::max(most.load(), now);
      absl::SleepFor(absl::Milliseconds(100));
      --running;
      return result;
    };
  };
  writer.Start(task(absl::DataLossError("first")));
  CheckpointWriter::Started second = writer.Start(task(absl::OkStatus()));
  EXPECT_EQ(second.previous.code(), absl::StatusCode::kDataLoss);
  EXPECT_GE(second.waited, absl::Milliseconds(50)) << "waited for the first write";
  EXPECT_TRUE(writer.Wait().ok());
  EXPECT_EQ(most.load(), 1) << "never two writes at once";
}

TEST(CheckpointWriterTest, AnExceptionInAWriteIsAStatus) {
  CheckpointWriter writer;
  writer.Start([]() -> absl::Status { throw std::runtime_error("file write failed"); });
  absl::Status st = writer.Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_NE(st.message().find("file write failed"), std::string::npos) << st;
}

TEST(CheckpointWriterTest, TheDestructorWaitsForTheWriteInFlight) {
  std::atomic<bool> finished{false};
  {
    CheckpointWriter writer;
    writer.Start([&] {
      absl::SleepFor(absl::Milliseconds(50));
      finished = true;
      return absl::OkStatus();
    });
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace zpipe::worker
