// End to end: submit -> schedule -> assignments with valid plans -> progress -> SUCCEEDED, plus
// WatchJob (with resume), GetPlan, cancel, idempotent resubmit, FIFO queueing and ListJobs paging.
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/plan.h"
#include "core/validator.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

struct Fixture {
  std::unique_ptr<coordinator::CoordinatorServer> server = StartCoordinator();
  std::unique_ptr<v1::CoordinatorService::Stub> stub =
      v1::CoordinatorService::NewStub(Connect(server->port()));

  grpc::Status Submit(const std::string& id, const v1::JobSpec& spec, v1::SubmitJobResponse* resp) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id(id);
    *req.mutable_spec() = spec;
    return stub->SubmitJob(&ctx, req, resp);
  }
  std::vector<std::unique_ptr<TestWorker>> Workers(int n, bool auto_run,
                                                   const std::string& prefix = "w") {
    std::vector<std::unique_ptr<TestWorker>> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(std::make_unique<TestWorker>(
          server->port(),
          TestWorker::Options{absl::StrCat(prefix, i), v1::DEVICE_KIND_CPU, auto_run}));
      EXPECT_TRUE(out.back()->Start());
    }
    return out;
  }
  // Reads the whole WatchJob stream; `first` (if given) is notified once the first event arrived.
  std::vector<v1::JobEvent> Watch(const std::string& id, uint64_t after, grpc::Status* status,
                                  absl::Notification* first = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_after_sequence(after);
    req.set_progress_interval_ms(20);
    auto reader = stub->WatchJob(&ctx, req);
    std::vector<v1::JobEvent> events;
    v1::JobEvent e;
    while (reader->Read(&e)) {
      events.push_back(e);
      if (first != nullptr && events.size() == 1) first->Notify();
    }
    if (first != nullptr && !first->HasBeenNotified()) first->Notify();
    *status = reader->Finish();
    return events;
  }
};

TEST(CoordinatorE2E, SubmitScheduleRunSucceeds) {
  Fixture f;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(
      f.Submit("e2e-1", SyntheticSpec(/*p=*/2, /*m=*/4, /*iterations=*/3), &submitted).ok());
  EXPECT_TRUE(submitted.created());
  EXPECT_EQ(submitted.job().state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(submitted.job().reason().find("waiting for 2 idle cpu workers"), std::string::npos)
      << submitted.job().reason();
  EXPECT_GT(submitted.job().predicted().makespan_ms(), 0);

  std::vector<v1::JobEvent> watched;
  grpc::Status watch_status;
  absl::Notification watching;
  std::thread watcher([&] { watched = f.Watch("e2e-1", 0, &watch_status, &watching); });
  ASSERT_TRUE(watching.WaitForNotificationWithTimeout(absl::Seconds(10)));

  auto workers = f.Workers(2, /*auto_run=*/true);
  v1::Job job = WaitForState(*f.stub, "e2e-1", v1::JOB_STATE_SUCCEEDED);
  watcher.join();
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_NE(job.reason().find("all 2 ranks finished 3 iterations"), std::string::npos);
  EXPECT_EQ(job.progress().iterations_done(), 3);
  EXPECT_EQ(job.latest_summary().iteration(), 2);
  ASSERT_EQ(job.latest_summary().ranks_size(), 2);
  EXPECT_TRUE(job.latest_summary().has_loss());
  EXPECT_NEAR(job.latest_summary().bubble_rate(), 0.2, 1e-9);
  ASSERT_EQ(job.ranks_size(), 2);
  EXPECT_TRUE(job.has_start_time());
  EXPECT_TRUE(job.has_end_time());
  // Progress: every F/B/W of the last iteration counted on both ranks.
  ASSERT_EQ(job.progress().ranks_size(), 2);
  for (const auto& r : job.progress().ranks()) {
    EXPECT_EQ(r.iteration(), 2);
    EXPECT_EQ(r.forward_done(), 4);
    EXPECT_EQ(r.backward_done(), 4);
    EXPECT_EQ(r.weight_done(), 4);
    ASSERT_EQ(r.microbatches_size(), 4);
    for (int phase : r.microbatches()) EXPECT_EQ(phase, v1::MICROBATCH_PHASE_DONE);
  }

  // Each worker got one assignment whose plan parses and validates.
  std::set<int> ranks;
  for (const auto& w : workers) {
    ASSERT_EQ(w->assignments().size(), 1u) << w->name();
    const v1::Assignment a = w->assignments()[0];
    ranks.insert(a.pipeline_rank());
    EXPECT_EQ(a.job_id(), "e2e-1");
    EXPECT_EQ(a.pipeline_size(), 2);
    EXPECT_EQ(a.data_size(), 1);
    EXPECT_EQ(a.peers_size(), 2);
    EXPECT_EQ(a.stage_costs_size(), 2);
    EXPECT_FALSE(a.rendezvous_prefix().empty());
    EXPECT_FALSE(a.buckets().empty());
    absl::StatusOr<core::Plan> plan = core::ParsePlanText(a.plan_text());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->num_ranks(), 2);
    EXPECT_EQ(plan->num_microbatches, 4);
    EXPECT_TRUE(plan->IsLowered());
    EXPECT_TRUE(core::ValidatePlan(*plan).ok()) << core::ValidatePlan(*plan);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));

  // WatchJob: snapshot first, then the state changes and one summary per iteration, ending OK.
  ASSERT_TRUE(watch_status.ok()) << watch_status.error_message();
  ASSERT_FALSE(watched.empty());
  EXPECT_TRUE(watched.front().has_snapshot());
  std::vector<v1::JobState> states;
  int iterations = 0;
  uint64_t running_seq = 0, last_seq = 0;
  for (const auto& e : watched) {
    EXPECT_GE(e.sequence(), last_seq);
    last_seq = e.sequence();
    if (e.has_state_change()) {
      states.push_back(e.state_change().to());
      if (e.state_change().to() == v1::JOB_STATE_RUNNING) running_seq = e.sequence();
    }
    if (e.has_iteration()) ++iterations;
  }
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::JOB_STATE_SCHEDULING, v1::JOB_STATE_RUNNING,
                                               v1::JOB_STATE_SUCCEEDED}));
  EXPECT_EQ(iterations, 3);
  EXPECT_TRUE(watched.back().has_state_change());

  // Resume after RUNNING: no snapshot, the three summaries and SUCCEEDED are replayed.
  grpc::Status resumed_status;
  std::vector<v1::JobEvent> resumed = f.Watch("e2e-1", running_seq, &resumed_status);
  ASSERT_TRUE(resumed_status.ok()) << resumed_status.error_message();
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_FALSE(resumed.front().has_snapshot());
  EXPECT_TRUE(resumed.front().has_iteration());
  EXPECT_EQ(resumed.back().state_change().to(), v1::JOB_STATE_SUCCEEDED);

  // A fresh watch of a finished job: just the snapshot.
  grpc::Status done_status;
  std::vector<v1::JobEvent> done = f.Watch("e2e-1", 0, &done_status);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].snapshot().state(), v1::JOB_STATE_SUCCEEDED);

  // GetPlan: per-rank text and predicted statistics.
  {
    grpc::ClientContext ctx;
    v1::GetPlanRequest req;
    req.set_job_id("e2e-1");
    v1::GetPlanResponse plan;
    ASSERT_TRUE(f.stub->GetPlan(&ctx, req, &plan).ok());
    EXPECT_EQ(plan.schedule(), "1f1b");
    ASSERT_EQ(plan.ranks_size(), 2);
    EXPECT_NE(plan.ranks(0).text().find("F s0 mb0"), std::string::npos);
    EXPECT_GT(plan.predicted().bubble_rate(), 0);
    EXPECT_LT(plan.predicted().bubble_rate(), 1);
    EXPECT_EQ(plan.predicted().peak_memory_size(), 2);
    EXPECT_TRUE(core::ParsePlanText(plan.plan_text()).ok());
  }
  // Workers are idle again; cancelling a finished job is refused.
  {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(f.stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    ASSERT_EQ(resp.workers_size(), 2);
    for (const auto& w : resp.workers()) EXPECT_EQ(w.state(), v1::WORKER_STATE_IDLE);
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id("e2e-1");
    v1::Job resp;
    EXPECT_EQ(f.stub->CancelJob(&ctx, req, &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
}

TEST(CoordinatorE2E, CancelReleasesWorkers) {
  Fixture f;
  auto workers = f.Workers(2, /*auto_run=*/false);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(f.Submit("cancel-me", SyntheticSpec(2, 4, 100), &submitted).ok());
  v1::Job job = WaitForState(*f.stub, "cancel-me", v1::JOB_STATE_RUNNING);
  ASSERT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id("cancel-me");
    req.set_reason("changed my mind");
    v1::Job resp;
    ASSERT_TRUE(f.stub->CancelJob(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.state(), v1::JOB_STATE_CANCELLED);
    EXPECT_EQ(resp.reason(), "changed my mind");
  }
  for (const auto& w : workers) {
    EXPECT_TRUE(w->WaitFor([&] { return w->cancels().size() == 1; })) << w->name();
    EXPECT_EQ(w->cancels()[0].job_id(), "cancel-me");
  }
  {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(f.stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    for (const auto& w : resp.workers()) EXPECT_EQ(w.state(), v1::WORKER_STATE_IDLE);
  }
  // Cancelling again is a no-op; an unknown job is NOT_FOUND.
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id("cancel-me");
    v1::Job resp;
    EXPECT_TRUE(f.stub->CancelJob(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.reason(), "changed my mind");
  }
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id("nope");
    v1::Job resp;
    EXPECT_EQ(f.stub->CancelJob(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // The released workers take the next job.
  ASSERT_TRUE(f.Submit("next", SyntheticSpec(2, 4, 1), &submitted).ok());
  EXPECT_EQ(WaitForState(*f.stub, "next", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
}

TEST(CoordinatorE2E, SubmitIsIdempotentOnJobId) {
  Fixture f;
  v1::SubmitJobResponse first, again, other;
  ASSERT_TRUE(f.Submit("idem", SyntheticSpec(), &first).ok());
  EXPECT_TRUE(first.created());
  ASSERT_TRUE(f.Submit("idem", SyntheticSpec(), &again).ok());
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.job().id(), "idem");
  EXPECT_EQ(again.job().create_time().seconds(), first.job().create_time().seconds());

  v1::JobSpec different = SyntheticSpec();
  different.mutable_train()->set_iterations(7);
  grpc::Status st = f.Submit("idem", different, &other);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(st.error_message().find("job_id"), std::string::npos);

  // No id: the coordinator picks one.
  v1::SubmitJobResponse generated;
  ASSERT_TRUE(f.Submit("", SyntheticSpec(), &generated).ok());
  EXPECT_FALSE(generated.job().id().empty());
  EXPECT_NE(generated.job().id(), "idem");

  // validate_only creates nothing.
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_job_id("dry");
  *req.mutable_spec() = SyntheticSpec();
  req.set_validate_only(true);
  v1::SubmitJobResponse dry;
  ASSERT_TRUE(f.stub->SubmitJob(&ctx, req, &dry).ok());
  EXPECT_EQ(dry.job().state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_GT(dry.job().predicted().bubble_rate(), 0);
  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id("dry");
  v1::Job missing;
  EXPECT_EQ(f.stub->GetJob(&get_ctx, get, &missing).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(CoordinatorE2E, PendingJobsQueueFifoAndListPages) {
  Fixture f;
  auto workers = f.Workers(2, /*auto_run=*/false);
  v1::SubmitJobResponse r;
  for (const char* id : {"q1", "q2", "q3"}) ASSERT_TRUE(f.Submit(id, SyntheticSpec(2), &r).ok());
  EXPECT_EQ(WaitForState(*f.stub, "q1", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
  v1::Job q3 = WaitForState(*f.stub, "q3", v1::JOB_STATE_PENDING);
  EXPECT_EQ(q3.queue_position(), 1);

  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.add_states(v1::JOB_STATE_PENDING);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(f.stub->ListJobs(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.jobs_size(), 2);
    EXPECT_EQ(resp.jobs(0).id(), "q2");
    EXPECT_EQ(resp.jobs(1).id(), "q3");
  }
  std::vector<std::string> paged;
  std::string token;
  do {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(1);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(f.stub->ListJobs(&ctx, req, &resp).ok());
    ASSERT_LE(resp.jobs_size(), 1);
    for (const auto& j : resp.jobs()) paged.push_back(j.id());
    token = resp.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(paged, (std::vector<std::string>{"q1", "q2", "q3"}));

  // Finishing q1 schedules q2 (FIFO).
  for (const auto& w : workers) {
    ASSERT_TRUE(w->WaitFor([&] { return w->assignments().size() == 1; }));
    const v1::Assignment a = w->assignments()[0];
    w->SendFinished(a.job_id(), a.pipeline_rank(), a.data_rank());
  }
  EXPECT_EQ(WaitForState(*f.stub, "q1", v1::JOB_STATE_SUCCEEDED).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(WaitForState(*f.stub, "q2", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(WaitForState(*f.stub, "q3", v1::JOB_STATE_PENDING).queue_position(), 0);
}

TEST(CoordinatorE2E, DataParallelRanksAndDeviceKinds) {
  Fixture f;
  // A CUDA job does not take CPU workers.
  v1::JobSpec cuda = SyntheticSpec(2, 4, 1);
  cuda.set_device(v1::DEVICE_KIND_CUDA);
  v1::SubmitJobResponse r;
  ASSERT_TRUE(f.Submit("gpu", cuda, &r).ok());
  ASSERT_TRUE(f.Submit("dp", SyntheticSpec(2, 4, 2, /*d=*/2), &r).ok());
  auto workers = f.Workers(4, /*auto_run=*/true);
  EXPECT_EQ(WaitForState(*f.stub, "dp", v1::JOB_STATE_SUCCEEDED).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(WaitForState(*f.stub, "gpu", v1::JOB_STATE_PENDING).state(), v1::JOB_STATE_PENDING);
  std::set<std::pair<int, int>> ranks;
  for (const auto& w : workers) {
    ASSERT_EQ(w->assignments().size(), 1u);
    const v1::Assignment a = w->assignments()[0];
    ranks.insert({a.pipeline_rank(), a.data_rank()});
    EXPECT_EQ(a.global_rank(), a.data_rank() * 2 + a.pipeline_rank());
    EXPECT_EQ(a.peers_size(), 4);
  }
  EXPECT_EQ(ranks.size(), 4u);
}

}  // namespace
}  // namespace zpipe::testing
