// Server-side limits against a real coordinator: a rendezvous flood stops at the job's quota and
// the coordinator's memory stays bounded; the pending-job limit; the gRPC message size limit.
// Each refusal is RESOURCE_EXHAUSTED naming its flag, and the coordinator keeps serving.
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

// This process's resident memory (the coordinator runs in it), from /proc/self/status.
int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb << 10;
    }
  }
  return -1;
}

coordinator::ServerOptions InMemory() {
  coordinator::ServerOptions options;
  options.db = ":memory:";
  return options;
}

grpc::Status Submit(v1::CoordinatorService::Stub& stub, const std::string& id,
                    v1::JobSpec spec = SyntheticSpec(2)) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_job_id(id);
  *req.mutable_spec() = std::move(spec);
  v1::SubmitJobResponse resp;
  return stub.SubmitJob(&ctx, req, &resp);
}

grpc::Status Set(v1::WorkerService::Stub& stub, const std::string& job, const std::string& key,
                 const std::string& value) {
  grpc::ClientContext ctx;
  v1::RendezvousSetRequest req;
  req.set_job_id(job);
  req.set_key(key);
  req.set_value(value);
  v1::RendezvousSetResponse resp;
  return stub.RendezvousSet(&ctx, req, &resp);
}

TEST(Limits, RendezvousFloodStopsAtTheJobQuotaAndMemoryStaysBounded) {
  coordinator::ServerOptions options = InMemory();
  options.rendezvous.job_bytes = 16 << 20;
  auto server = StartCoordinator(options);
  auto channel = Connect(server->port());
  auto client = v1::CoordinatorService::NewStub(channel);
  auto worker = v1::WorkerService::NewStub(channel);
  ASSERT_TRUE(Submit(*client, "flood").ok());
  ASSERT_TRUE(Submit(*client, "other").ok());

  const std::string mib(1 << 20, 'v');  // the largest value a key may hold
  ASSERT_TRUE(Set(*worker, "flood", "warm-up", "x").ok());
  const int64_t rss_before = RssBytes();
  int accepted = 0, refused = 0;
  grpc::Status last;
  for (int i = 0; i < 256; ++i) {  // 256 MiB offered, 16 MiB allowed
    grpc::Status st = Set(*worker, "flood", absl::StrCat("k", i), mib);
    if (st.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
      ++refused;
      last = st;
    }
  }
  const int64_t growth = RssBytes() - rss_before;
  EXPECT_EQ(accepted, 15);  // 16 MiB minus the keys and the warm-up leave room for 15
  EXPECT_EQ(refused, 256 - 15);
  EXPECT_TRUE(absl::StrContains(last.error_message(),
                                "rendezvous quota of job 'flood': 16777216 "
                                "bytes"))
      << last.error_message();
  EXPECT_TRUE(absl::StrContains(last.error_message(), "--rendezvous-job-bytes"));
  // The quota plus gRPC's transient buffers; unbounded, this flood would add 256 MiB.
  EXPECT_LT(growth, int64_t{96} << 20) << "RSS grew by " << growth << " bytes";

  // Overwriting a stored key still works at the quota; other jobs are unaffected.
  EXPECT_TRUE(Set(*worker, "flood", "k0", mib).ok());
  EXPECT_TRUE(Set(*worker, "other", "k0", mib).ok());
  // The store, and its quota, go with the job.
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_job_id("flood");
  v1::Job resp;
  ASSERT_TRUE(client->CancelJob(&ctx, cancel, &resp).ok());
  EXPECT_EQ(Set(*worker, "flood", "k0", "x").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(Limits, PendingJobLimit) {
  coordinator::ServerOptions options = InMemory();
  options.max_pending_jobs = 3;
  auto server = StartCoordinator(options);
  auto client = v1::CoordinatorService::NewStub(Connect(server->port()));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(*client, absl::StrCat("j", i)).ok());
  grpc::Status st = Submit(*client, "j3");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(),
            "3 jobs are pending (the --max-pending-jobs limit of 3); wait or cancel some");
  EXPECT_TRUE(Submit(*client, "j0").ok());  // a resubmit is idempotent, not a new job
}

TEST(Limits, MaxMessageBytesIsConfigurableAndTheCoordinatorKeepsServing) {
  coordinator::ServerOptions options = InMemory();
  options.max_message_bytes = 1 << 20;
  auto server = StartCoordinator(options);
  auto client = v1::CoordinatorService::NewStub(Connect(server->port()));
  v1::JobSpec spec = SyntheticSpec(2);
  spec.set_name(std::string(2 << 20, 'x'));
  EXPECT_EQ(Submit(*client, "big", spec).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Submit(*client, "after").ok());
}

}  // namespace
}  // namespace zpipe::testing
