// zpipe::Client against an in-process fake CoordinatorService: status mapping, paging, plan
// decoding, and Watch's resume-after-disconnect and cancellation.
#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "zpipe/v1/coordinator.grpc.pb.h"

namespace zpipe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobEvent Event(uint64_t seq) {
  v1::JobEvent e;
  e.set_sequence(seq);
  return e;
}

v1::JobEvent StateEvent(uint64_t seq, v1::JobState from, v1::JobState to) {
  v1::JobEvent e = Event(seq);
  e.mutable_state_change()->set_from(from);
  e.mutable_state_change()->set_to(to);
  return e;
}

class FakeCoordinator final : public v1::CoordinatorService::Service {
 public:
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* job) override {
    if (req->job_id() != "known")
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job nope not found");
    job->set_id("known");
    job->set_state(v1::JOB_STATE_RUNNING);
    return grpc::Status::OK;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse*) override {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("spec.parallel.pipeline: must be in [1, 64], got ",
                                     req->spec().parallel().pipeline()));
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    // Five jobs, two per page.
    int start = req->page_token().empty() ? 0 : std::stoi(req->page_token());
    for (int i = start; i < std::min(start + 2, 5); ++i)
      resp->add_jobs()->set_id(absl::StrCat("j", i));
    if (start + 2 < 5) resp->set_next_page_token(std::to_string(start + 2));
    return grpc::Status::OK;
  }

  grpc::Status GetPlan(grpc::ServerContext*, const v1::GetPlanRequest* req,
                       v1::GetPlanResponse* resp) override {
    core::Plan plan = core::EmptyPlan("1f1b", core::Placement::Linear(2), 1);
    plan.ranks[0] = {core::Action::F(0, 0), core::Action::BW(0, 0)};
    plan.ranks[1] = {core::Action::F(1, 0), core::Action::BW(1, 0)};
    resp->set_job_id(req->job_id());
    resp->set_plan_text(core::PlanToText(plan));
    resp->mutable_predicted()->set_bubble_rate(0.5);
    return grpc::Status::OK;
  }

  // First call: snapshot, state change, then the connection "breaks" (UNAVAILABLE).
  // Second call: replays seq 2 (already seen), then iteration 3 and the terminal change 4.
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      after_sequences_.push_back(req->after_sequence());
    }
    if (req->job_id() == "forever") {
      v1::JobEvent snap = Event(1);
      snap.mutable_snapshot()->set_id("forever");
      writer->Write(snap);
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status::CANCELLED;
    }
    if (req->after_sequence() == 0) {
      v1::JobEvent snap = Event(1);
      snap.mutable_snapshot()->set_id("known");
      snap.mutable_snapshot()->set_state(v1::JOB_STATE_PENDING);
      writer->Write(snap);
      writer->Write(StateEvent(2, v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING));
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    writer->Write(StateEvent(2, v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING));
    v1::JobEvent it = Event(3);
    it.mutable_iteration()->set_iteration(0);
    writer->Write(it);
    v1::JobEvent progress = Event(3);
    progress.mutable_progress()->set_iteration(1);
    writer->Write(progress);
    writer->Write(StateEvent(4, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
    return grpc::Status::OK;
  }

  std::vector<uint64_t> after_sequences() {
    std::lock_guard<std::mutex> lock(mu_);
    return after_sequences_;
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> after_sequences_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = Client::Create(absl::StrCat("127.0.0.1:", port));
  }
  void TearDown() override { server_->Shutdown(); }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, MapsStatusCodes) {
  absl::StatusOr<v1::Job> job = client_->Get("known");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_RUNNING);

  absl::StatusOr<v1::Job> missing = client_->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("not found"));

  v1::JobSpec spec;
  spec.mutable_parallel()->set_pipeline(0);
  absl::StatusOr<SubmitResult> bad = client_->Submit(spec, "x");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("spec.parallel.pipeline"));
}

// gRPC refuses an oversized request before any handler runs, in its own words; the client
// restates it with the size, the limit and the coordinator's flag.
TEST(ClientOversizeTest, NamesTheSizeTheLimitAndTheFlag) {
  FakeCoordinator fake;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake);
  builder.SetMaxReceiveMessageSize(1 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = Client::Create(absl::StrCat("127.0.0.1:", port));
  v1::JobSpec spec;
  spec.set_name(std::string(5 << 19, 'x'));  // 2.5 MiB
  absl::StatusOr<SubmitResult> result = client->Submit(spec, "big");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("the job spec is 2.5 MiB; the coordinator accepts at most 1.0 MiB per "
                        "request (--max-message-bytes on zpipe-coordinator)"));
  server->Shutdown();
}

TEST(ExplainOversizeRequestTest, LeavesOtherErrorsAlone) {
  const absl::Status quota = absl::ResourceExhaustedError("the --max-pending-jobs limit");
  EXPECT_EQ(ExplainOversizeRequest(quota, "the job spec"), quota);
  const absl::Status other = absl::InvalidArgumentError("larger than max (1 vs. 2)");
  EXPECT_EQ(ExplainOversizeRequest(other, "the job spec"), other);
  EXPECT_EQ(ExplainOversizeRequest(absl::ResourceExhaustedError(
                                       "Received message larger than max (20971600 vs. 16777216)"),
                                   "the job spec")
                .message(),
            "the job spec is 20.0 MiB; the coordinator accepts at most 16.0 MiB per request "
            "(--max-message-bytes on zpipe-coordinator)");
}

TEST(ClientUnreachableTest, IsUnavailable) {
  std::unique_ptr<Client> client = Client::Create("127.0.0.1:1");
  EXPECT_EQ(client->Get("x").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client->Workers().status().code(), absl::StatusCode::kUnavailable);
  std::unique_ptr<JobWatch> watch = client->Watch("x");
  EXPECT_EQ(watch->Next().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ClientTest, ListAllFollowsPages) {
  absl::StatusOr<std::vector<v1::Job>> jobs = client_->ListAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> ids;
  for (const v1::Job& j : *jobs) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre("j0", "j1", "j2", "j3", "j4"));
}

TEST_F(ClientTest, PlanDecodesCorePlan) {
  absl::StatusOr<JobPlan> plan = client_->Plan("known");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->plan.num_ranks(), 2);
  EXPECT_EQ(plan->plan.ranks[1][1], core::Action::BW(1, 0));
  EXPECT_DOUBLE_EQ(plan->predicted.bubble_rate(), 0.5);
}

TEST_F(ClientTest, WatchResumesAfterDisconnectWithoutDuplicates) {
  std::vector<uint64_t> sequences;
  std::vector<v1::JobEvent::KindCase> kinds;
  absl::Status status = client_->Watch("known", {}, [&](const v1::JobEvent& e) {
    sequences.push_back(e.sequence());
    kinds.push_back(e.kind_case());
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(sequences, ElementsAre(1, 2, 3, 3, 4));
  EXPECT_THAT(kinds, ElementsAre(v1::JobEvent::kSnapshot, v1::JobEvent::kStateChange,
                                 v1::JobEvent::kIteration, v1::JobEvent::kProgress,
                                 v1::JobEvent::kStateChange));
  EXPECT_THAT(fake_.after_sequences(), ElementsAre(0, 2));
}

TEST_F(ClientTest, WatchIteratorEndsAndCancels) {
  std::unique_ptr<JobWatch> watch = client_->Watch("forever");
  absl::StatusOr<std::optional<v1::JobEvent>> first = watch->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ(watch->last_sequence(), 1u);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    watch->Cancel();
  });
  absl::StatusOr<std::optional<v1::JobEvent>> next = watch->Next();
  canceller.join();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kCancelled);
}

TEST(JobStateTest, NamesRoundTrip) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "running");
  EXPECT_EQ(*ParseJobState("running"), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(*ParseJobState("JOB_STATE_FAILED"), v1::JOB_STATE_FAILED);
  EXPECT_FALSE(ParseJobState("unspecified").ok());
  EXPECT_FALSE(ParseJobState("sleeping").ok());
}

}  // namespace
}  // namespace zpipe
