// Rendezvous: per-job Set / Get / Wait, a Wait that times out with DEADLINE_EXCEEDED, a Wait woken
// by a Set, and a store that closes with its job.
#include <thread>

#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartCoordinator();
    auto channel = Connect(server_->port());
    client_ = v1::CoordinatorService::NewStub(channel);
    worker_ = v1::WorkerService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id("rdv");
    *req.mutable_spec() = SyntheticSpec(2);
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(client_->SubmitJob(&ctx, req, &resp).ok());
  }

  grpc::Status Set(const std::string& job, const std::string& key, const std::string& value) {
    grpc::ClientContext ctx;
    v1::RendezvousSetRequest req;
    req.set_job_id(job);
    req.set_key(key);
    req.set_value(value);
    v1::RendezvousSetResponse resp;
    return worker_->RendezvousSet(&ctx, req, &resp);
  }
  grpc::Status Get(const std::string& job, const std::string& key, std::string* value) {
    grpc::ClientContext ctx;
    v1::RendezvousGetRequest req;
    req.set_job_id(job);
    req.set_key(key);
    v1::RendezvousGetResponse resp;
    grpc::Status st = worker_->RendezvousGet(&ctx, req, &resp);
    *value = resp.value();
    return st;
  }
  grpc::Status Wait(const std::string& job, std::vector<std::string> keys, absl::Duration timeout,
                    v1::RendezvousWaitResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::RendezvousWaitRequest req;
    req.set_job_id(job);
    for (auto& k : keys) req.add_keys(k);
    req.mutable_timeout()->set_seconds(absl::ToInt64Seconds(timeout));
    req.mutable_timeout()->set_nanos(
        static_cast<int>(absl::ToInt64Nanoseconds(timeout) % 1'000'000'000));
    return worker_->RendezvousWait(&ctx, req, resp);
  }

  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::unique_ptr<v1::CoordinatorService::Stub> client_;
  std::unique_ptr<v1::WorkerService::Stub> worker_;
};

TEST_F(RendezvousTest, SetGetWait) {
  ASSERT_TRUE(Set("rdv", "rdv/a1/gloo/0", std::string("\x00\x01binary", 8)).ok());
  std::string value;
  ASSERT_TRUE(Get("rdv", "rdv/a1/gloo/0", &value).ok());
  EXPECT_EQ(value, std::string("\x00\x01binary", 8));
  EXPECT_EQ(Get("rdv", "missing", &value).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Set("rdv", "rdv/a1/gloo/0", "overwritten").ok());
  ASSERT_TRUE(Set("rdv", "k2", "v2").ok());

  v1::RendezvousWaitResponse resp;
  ASSERT_TRUE(Wait("rdv", {"rdv/a1/gloo/0", "k2"}, absl::Seconds(1), &resp).ok());
  ASSERT_EQ(resp.values_size(), 2);
  EXPECT_EQ(resp.values(0), "overwritten");
  EXPECT_EQ(resp.values(1), "v2");
  // Keys are per job.
  EXPECT_EQ(Get("other", "k2", &value).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Set("other", "k2", "x").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RendezvousTest, WaitTimesOutWithDeadlineExceeded) {
  v1::RendezvousWaitResponse resp;
  const absl::Time start = absl::Now();
  grpc::Status st = Wait("rdv", {"never"}, absl::Milliseconds(300), &resp);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_F(RendezvousTest, WaitIsWokenBySet) {
  v1::RendezvousWaitResponse resp;
  grpc::Status st;
  std::thread waiter([&] { st = Wait("rdv", {"late"}, absl::Seconds(5), &resp); });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(Set("rdv", "late", "here").ok());
  waiter.join();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.values(0), "here");
}

TEST_F(RendezvousTest, StoreClosesWithTheJob) {
  v1::RendezvousWaitResponse resp;
  grpc::Status st;
  std::thread waiter([&] { st = Wait("rdv", {"never"}, absl::Seconds(5), &resp); });
  absl::SleepFor(absl::Milliseconds(100));
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id("rdv");
  v1::Job job;
  ASSERT_TRUE(client_->CancelJob(&ctx, cancel, &job).ok());
  waiter.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_EQ(Set("rdv", "k", "v").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(RendezvousTest, BadKeysAndValues) {
  EXPECT_EQ(Set("rdv", "", "v").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Set("rdv", std::string(600, 'k'), "v").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Set("rdv", "big", std::string((1 << 20) + 1, 'v')).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::RendezvousWaitResponse resp;
  EXPECT_EQ(Wait("rdv", {}, absl::Seconds(1), &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zpipe::testing
