// Coordinator restart on the same SQLite file: every job is listed with its last state, reason and
// summary; RUNNING jobs continue when their workers reconnect and fail when they do not.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

std::string TempDb(const std::string& name) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, "-", getpid(), ".db");
  std::remove(path.c_str());
  std::remove((path + "-wal").c_str());
  std::remove((path + "-shm").c_str());
  return path;
}

grpc::Status Submit(v1::CoordinatorService::Stub& stub, const std::string& id,
                    const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_job_id(id);
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  return stub.SubmitJob(&ctx, req, &resp);
}

TEST(Restart, JobsSurviveAndRunningJobsReconcile) {
  const std::string db = TempDb("restart");
  const absl::Duration timeout = absl::Seconds(2);
  v1::Job done_before;
  {
    auto server = StartCoordinator(db, timeout);
    auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
    ASSERT_TRUE(Submit(*stub, "done", SyntheticSpec(1, 2, 2)).ok());
    {
      TestWorker w(server->port(), {"rw-auto", v1::DEVICE_KIND_CPU, true});
      ASSERT_TRUE(w.Start());
      done_before = WaitForState(*stub, "done", v1::JOB_STATE_SUCCEEDED);
      ASSERT_EQ(done_before.state(), v1::JOB_STATE_SUCCEEDED);
    }
    // Its session closed: the coordinator notices on its own time (a read completes on one of
    // gRPC's threads), and until then rw-auto, idle, could take the job meant for rw-hold.
    const absl::Time gone_by = absl::Now() + absl::Seconds(10);
    while (absl::Now() < gone_by) {
      grpc::ClientContext list_ctx;
      v1::ListWorkersResponse workers;
      ASSERT_TRUE(stub->ListWorkers(&list_ctx, v1::ListWorkersRequest(), &workers).ok());
      bool idle = false;
      for (const v1::Worker& w : workers.workers()) {
        idle = idle || (w.name() == "rw-auto" && w.state() == v1::WORKER_STATE_IDLE);
      }
      if (!idle) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    v1::JobSpec cuda = SyntheticSpec(4);
    cuda.set_device(v1::DEVICE_KIND_CUDA);  // queued behind no CPU job: there is no CUDA worker
    ASSERT_TRUE(Submit(*stub, "waiting", cuda).ok());
    ASSERT_TRUE(Submit(*stub, "stopped", SyntheticSpec(8)).ok());
    grpc::ClientContext ctx;
    v1::CancelJobRequest cancel;
    cancel.set_job_id("stopped");
    v1::Job cancelled;
    ASSERT_TRUE(stub->CancelJob(&ctx, cancel, &cancelled).ok());
    TestWorker holder(server->port(), {"rw-hold", v1::DEVICE_KIND_CPU, false});
    ASSERT_TRUE(holder.Start());
    ASSERT_TRUE(Submit(*stub, "running", SyntheticSpec(1, 2, 50)).ok());
    ASSERT_EQ(WaitForState(*stub, "running", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
    server->Shutdown();
  }

  auto server = StartCoordinator(db, timeout);
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  std::map<std::string, v1::Job> jobs;
  std::vector<std::string> order;
  for (const auto& j : list.jobs()) {
    jobs[j.id()] = j;
    order.push_back(j.id());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"done", "waiting", "stopped", "running"}));
  EXPECT_EQ(jobs["done"].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(jobs["done"].reason(), done_before.reason());
  EXPECT_EQ(jobs["done"].latest_summary().iteration(), 1);
  EXPECT_EQ(jobs["done"].end_time().seconds(), done_before.end_time().seconds());
  {
    // The plan (and so the predicted statistics) is remade after the restart.
    grpc::ClientContext get_ctx;
    v1::GetJobRequest get;
    get.set_job_id("done");
    v1::Job done_after;
    ASSERT_TRUE(stub->GetJob(&get_ctx, get, &done_after).ok());
    EXPECT_DOUBLE_EQ(done_after.predicted().bubble_rate(), done_before.predicted().bubble_rate());
    EXPECT_GT(done_after.predicted().makespan_ms(), 0);
  }
  EXPECT_EQ(jobs["waiting"].state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(jobs["stopped"].state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(jobs["running"].state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(jobs["running"].ranks_size(), 1);
  EXPECT_EQ(jobs["running"].ranks(0).worker_name(), "rw-hold");

  // The worker comes back claiming its job and rank: the job continues and can finish.
  TestWorker::Options back{"rw-hold", v1::DEVICE_KIND_CPU, false};
  back.running_job_id = "running";
  TestWorker worker(server->port(), back);
  ASSERT_TRUE(worker.Start());
  EXPECT_TRUE(worker.resumed());
  worker.SendFinished("running", 0, 0);
  EXPECT_EQ(WaitForState(*stub, "running", v1::JOB_STATE_SUCCEEDED).state(),
            v1::JOB_STATE_SUCCEEDED);

  // Watch sequences keep increasing across the restart.
  grpc::ClientContext wctx;
  v1::WatchJobRequest wreq;
  wreq.set_job_id("done");
  auto reader = stub->WatchJob(&wctx, wreq);
  v1::JobEvent snapshot;
  ASSERT_TRUE(reader->Read(&snapshot));
  EXPECT_GE(snapshot.sequence(), 4u);  // SCHEDULING, RUNNING, 2 iterations, SUCCEEDED
}

TEST(Restart, RunningJobFailsWhenItsWorkerDoesNotReturn) {
  const std::string db = TempDb("restart-lost");
  const absl::Duration timeout = absl::Milliseconds(500);
  {
    auto server = StartCoordinator(db, timeout);
    auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
    TestWorker holder(server->port(), {"gone", v1::DEVICE_KIND_CPU, false});
    ASSERT_TRUE(holder.Start());
    ASSERT_TRUE(Submit(*stub, "orphan", SyntheticSpec(1, 2, 50)).ok());
    ASSERT_EQ(WaitForState(*stub, "orphan", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
    server->Shutdown();
  }
  auto server = StartCoordinator(db, timeout);
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  v1::Job job = WaitForState(*stub, "orphan", v1::JOB_STATE_FAILED, absl::Seconds(5));
  ASSERT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("worker gone (pipeline rank 0, data rank 0)"), std::string::npos)
      << job.reason();
  EXPECT_NE(job.reason().find("did not reconnect"), std::string::npos) << job.reason();
}

}  // namespace
}  // namespace zpipe::testing
