// Capability reporting end to end: a real zpipe-worker registers what it can run with a real
// coordinator, `zpipe workers` shows it, and a CUDA job that no registered worker can run waits
// with a reason naming each worker and why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "tests/cli/subprocess.h"
#include "tests/support/local_cluster.h"

namespace zpipe {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::ProcessResult;

class CapabilitiesE2eTest : public ::testing::Test {
 protected:
  CapabilitiesE2eTest()
      : cluster_(1, {.coordinator_bin = ZPIPE_COORDINATOR_BIN, .worker_bin = ZPIPE_WORKER_BIN}) {}

  ProcessResult Zpipe(std::vector<std::string> args) {
    args.insert(args.begin(), {ZPIPE_CLI_BIN, "--coordinator", cluster_.address()});
    return testing::RunProcess(args);
  }

  testing::LocalCluster cluster_;
};

TEST_F(CapabilitiesE2eTest, WorkersShowsTheLibTorchTheWorkerRuns) {
  ASSERT_TRUE(cluster_.WaitIdle(1)) << cluster_.worker(0).ReadErr();

  ProcessResult r = Zpipe({"workers", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json w = json::parse(r.out)["workers"][0];
  const json& caps = w["capabilities"];
  // The version CMake found is the one the worker was built and runs with.
  EXPECT_EQ(caps["libtorch_version"], ZPIPE_TORCH_VERSION);
  const bool torch_cuda = caps["torch_cuda"];
  if (!torch_cuda) {
    EXPECT_EQ(caps["cuda_device_count"], 0);
  }
  EXPECT_EQ(caps["nccl"], ZPIPE_WITH_NCCL_BUILD != 0);

  r = Zpipe({"workers"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_THAT(lines[0], HasSubstr("LIBTORCH"));
  EXPECT_THAT(lines[1], HasSubstr("cpu:0"));
  EXPECT_THAT(lines[1],
              HasSubstr(absl::StrCat(ZPIPE_TORCH_VERSION, torch_cuda ? "+cuda" : "+cpu")));
}

TEST_F(CapabilitiesE2eTest, CudaJobNoWorkerCanRunWaitsNamingThem) {
  ASSERT_TRUE(cluster_.WaitIdle(1)) << cluster_.worker(0).ReadErr();
  v1::JobSpec spec;
  spec.set_name("needs-cuda");
  auto* synthetic = spec.mutable_model()->mutable_synthetic();
  synthetic->set_forward_ms(1);
  synthetic->set_backward_ms(1);
  synthetic->set_weight_ms(1);
  synthetic->set_activation_kb(1);
  spec.mutable_parallel()->set_pipeline(1);
  spec.mutable_schedule()->set_kind("1f1b");
  spec.mutable_batch()->set_microbatches(2);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(1);
  spec.mutable_train()->set_lr(0.1);
  spec.set_device(v1::DEVICE_KIND_CUDA);
  auto submitted = cluster_.client().Submit(spec, "gpu-job");
  ASSERT_TRUE(submitted.ok()) << submitted.status();

  ProcessResult r = Zpipe({"status", "gpu-job"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("waiting for 1 idle cuda workers (0 available); 0 of 1 registered "
                               "worker can run cuda jobs (w0: started for cpu:0)"));
}

}  // namespace
}  // namespace zpipe
