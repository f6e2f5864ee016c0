// Worker liveness: a worker that stops heartbeating, restarts, or reports a failure takes its job
// to FAILED with a reason naming the worker and its rank; the other workers are released.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

// Generous against a loaded machine: healthy workers heartbeat every timeout / 5.
constexpr absl::Duration kTimeout = absl::Milliseconds(1500);

struct Running {
  std::unique_ptr<coordinator::CoordinatorServer> server = StartCoordinator(":memory:", kTimeout);
  std::unique_ptr<v1::CoordinatorService::Stub> stub =
      v1::CoordinatorService::NewStub(Connect(server->port()));
  std::vector<std::unique_ptr<TestWorker>> workers;

  explicit Running(const std::string& job_id) {
    for (int i = 0; i < 2; ++i) {
      workers.push_back(std::make_unique<TestWorker>(
          server->port(), TestWorker::Options{absl::StrCat("lw", i), v1::DEVICE_KIND_CPU, false}));
      EXPECT_TRUE(workers.back()->Start());
    }
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id(job_id);
    *req.mutable_spec() = SyntheticSpec(2, 4, 100);
    v1::SubmitJobResponse resp;
    EXPECT_TRUE(stub->SubmitJob(&ctx, req, &resp).ok());
    EXPECT_EQ(WaitForState(*stub, job_id, v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
    for (auto& w : workers) {
      EXPECT_TRUE(w->WaitFor([&] { return !w->assignments().empty(); })) << w->name();
    }
  }
  int RankOf(int worker) { return workers[worker]->assignments().at(0).pipeline_rank(); }
};

TEST(Liveness, HeartbeatLossFailsTheJobNamingTheWorker) {
  Running r("hb-job");
  const int rank = r.RankOf(1);
  r.workers[1]->StopHeartbeats();
  v1::Job job = WaitForState(*r.stub, "hb-job", v1::JOB_STATE_FAILED, absl::Seconds(5));
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("worker lw1"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find(absl::StrCat("pipeline rank ", rank)), std::string::npos)
      << job.reason();
  EXPECT_NE(job.reason().find("no heartbeat"), std::string::npos) << job.reason();
  // The healthy worker is told to stop and is idle again; the silent one is dead.
  EXPECT_TRUE(r.workers[0]->WaitFor([&] { return !r.workers[0]->cancels().empty(); }));
  grpc::ClientContext ctx;
  v1::ListWorkersRequest req;
  req.set_include_dead(true);
  v1::ListWorkersResponse resp;
  ASSERT_TRUE(r.stub->ListWorkers(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.workers_size(), 2);
  EXPECT_EQ(resp.workers(0).state(), v1::WORKER_STATE_IDLE);
  EXPECT_EQ(resp.workers(1).state(), v1::WORKER_STATE_DEAD);
  EXPECT_NE(resp.workers(1).reason().find("no heartbeat"), std::string::npos);
}

TEST(Liveness, RankFailureFailsTheJob) {
  Running r("fail-job");
  const v1::Assignment a = r.workers[0]->assignments().at(0);
  r.workers[0]->SendFailure("fail-job", a.pipeline_rank(), a.data_rank(), "out of memory");
  v1::Job job = WaitForState(*r.stub, "fail-job", v1::JOB_STATE_FAILED);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("worker lw0"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("out of memory"), std::string::npos) << job.reason();
  EXPECT_TRUE(r.workers[1]->WaitFor([&] { return !r.workers[1]->cancels().empty(); }));
}

TEST(Liveness, WorkerRestartWithoutItsJobFailsTheJob) {
  Running r("restart-job");
  // A new process (new instance id) takes the name back once the old one's stream is gone.
  r.workers[1]->Stop();
  TestWorker again(r.server->port(), TestWorker::Options{"lw1", v1::DEVICE_KIND_CPU, false});
  ASSERT_TRUE(again.WaitFor([&] {
    if (again.Start()) return true;
    EXPECT_EQ(again.last_error().error_code(), grpc::StatusCode::ALREADY_EXISTS);
    return false;
  }));
  EXPECT_FALSE(again.resumed());
  v1::Job job = WaitForState(*r.stub, "restart-job", v1::JOB_STATE_FAILED);
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("worker lw1"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("re-registered without the job"), std::string::npos) << job.reason();
}

TEST(Liveness, StreamReconnectClaimingTheJobContinues) {
  Running r("reconnect-job");
  const v1::Assignment a = r.workers[1]->assignments().at(0);
  TestWorker::Options options{"lw1", v1::DEVICE_KIND_CPU, false};
  options.running_job_id = "reconnect-job";
  options.running_pipeline_rank = a.pipeline_rank();
  options.running_data_rank = a.data_rank();
  options.instance_id = r.workers[1]->instance_id();  // the same process, a new stream
  TestWorker again(r.server->port(), options);
  ASSERT_TRUE(again.Start());
  EXPECT_TRUE(again.resumed());
  const v1::Assignment a0 = r.workers[0]->assignments().at(0);
  r.workers[0]->SendFinished("reconnect-job", a0.pipeline_rank(), a0.data_rank());
  again.SendFinished("reconnect-job", a.pipeline_rank(), a.data_rank());
  v1::Job job = WaitForState(*r.stub, "reconnect-job", v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
}

}  // namespace
}  // namespace zpipe::testing
