// What a worker says when it cannot run a `device: cuda` job: never silently on the CPU.
#include "worker/daemon/job_runner.h"

#include <gtest/gtest.h>

#include "worker/comm/factory/communicator_factory.h"

namespace zpipe::worker {
namespace {

TEST(CanRunCudaJobsTest, ACpuWorkerSaysItWasStartedForTheCpu) {
  JobRunnerOptions o;
  o.device_kind = DeviceKind::kCpu;
  const absl::Status st = CanRunCudaJobs(o);
  ASSERT_TRUE(absl::IsFailedPrecondition(st));
  EXPECT_NE(st.message().find("started for the CPU"), std::string::npos) << st;
  EXPECT_NE(st.message().find("--device cuda:N"), std::string::npos) << st;
}

TEST(CanRunCudaJobsTest, ACudaWorkerSaysWhatItLacks) {
  JobRunnerOptions o;
  o.device_kind = DeviceKind::kCuda;
  o.device_index = 0;
  const absl::Status st = CanRunCudaJobs(o);
  if (!TorchHasCuda()) {
    // Debian's LibTorch: a CPU-only build, named with its version.
    ASSERT_TRUE(absl::IsFailedPrecondition(st));
    EXPECT_NE(st.message().find("built without CUDA"), std::string::npos) << st;
    EXPECT_NE(st.message().find(TORCH_VERSION), std::string::npos) << st;
  } else if (!torch::cuda::is_available()) {
    ASSERT_TRUE(absl::IsFailedPrecondition(st));
    EXPECT_NE(st.message().find("sees 0 CUDA device"), std::string::npos) << st;
  } else if (!NcclAvailable()) {
    ASSERT_TRUE(absl::IsFailedPrecondition(st));
    EXPECT_NE(st.message().find("without the NCCL communicator"), std::string::npos) << st;
  } else {
    EXPECT_TRUE(st.ok()) << st;
  }
}

TEST(CanRunCudaJobsTest, ADeviceIndexBeyondTheVisibleOnesIsRefused) {
  if (!TorchHasCuda()) GTEST_SKIP() << "a CPU-only LibTorch is refused before the index";
  JobRunnerOptions o;
  o.device_kind = DeviceKind::kCuda;
  o.device_index = 1000;
  const absl::Status st = CanRunCudaJobs(o);
  ASSERT_TRUE(absl::IsFailedPrecondition(st));
  EXPECT_NE(st.message().find("cuda:1000"), std::string::npos) << st;
}

}  // namespace
}  // namespace zpipe::worker
