// /metrics over HTTP shows the job and worker gauges and RPC counters; grpc.health.v1 answers.
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

// The value of the sample whose name-and-labels text is `series`, or -1.
double Sample(const std::string& body, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

TEST(Metrics, ScrapeShowsJobsWorkersAndRpcs) {
  auto server = StartCoordinator();
  ASSERT_GT(server->metrics_port(), 0);
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  TestWorker worker(server->port(), {"mw0", v1::DEVICE_KIND_CPU, false});
  ASSERT_TRUE(worker.Start());
  for (const char* id : {"m1", "m2"}) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id(id);
    *req.mutable_spec() = SyntheticSpec(/*p=*/1);
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(stub->SubmitJob(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id("Bad ID");
    v1::SubmitJobResponse resp;
    EXPECT_FALSE(stub->SubmitJob(&ctx, req, &resp).ok());
  }
  ASSERT_EQ(WaitForState(*stub, "m1", v1::JOB_STATE_RUNNING).state(), v1::JOB_STATE_RUNNING);

  const std::string body = HttpGet(server->metrics_port(), "/metrics");
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(Sample(body, "zpipe_jobs{state=\"running\"}"), 1) << body;
  EXPECT_EQ(Sample(body, "zpipe_jobs{state=\"pending\"}"), 1) << body;
  EXPECT_EQ(Sample(body, "zpipe_jobs{state=\"failed\"}"), 0) << body;
  EXPECT_EQ(Sample(body, "zpipe_workers{state=\"busy\"}"), 1) << body;
  EXPECT_EQ(Sample(body, "zpipe_workers{state=\"idle\"}"), 0) << body;
  EXPECT_EQ(Sample(body, "zpipe_rpcs_total{code=\"OK\",method=\"SubmitJob\"}"), 2) << body;
  EXPECT_EQ(Sample(body, "zpipe_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"SubmitJob\"}"), 1)
      << body;
  EXPECT_EQ(Sample(body, "zpipe_rpcs_total{code=\"OK\",method=\"RegisterWorker\"}"), 1) << body;
}

TEST(Metrics, HealthServiceServes) {
  auto server = StartCoordinator();
  grpc::GenericStub generic(Connect(server->port()));
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""} encodes to no bytes
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  auto call = generic.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&response, &st, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace zpipe::testing
