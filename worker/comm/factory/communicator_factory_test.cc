#include "worker/comm/factory/communicator_factory.h"

#include <gtest/gtest.h>

namespace zpipe::worker {
namespace {

TEST(CommunicatorFactoryTest, CpuStagesGetTheTcpStreams) {
  auto store = NewInMemoryStore();
  CommunicatorOptions o;
  o.key_prefix = "factory/";
  auto comm = NewCommunicator(torch::kCPU, o, *store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->device(), torch::Device(torch::kCPU));
}

TEST(CommunicatorFactoryTest, CudaStagesGetNcclOrAReason) {
  auto store = NewInMemoryStore();
  CommunicatorOptions o;
  o.key_prefix = "factory-cuda/";
  o.timeout = absl::Seconds(20);
  if (!NcclAvailable()) {
    auto comm = NewCommunicator(torch::Device(torch::kCUDA, 0), o, *store);
    ASSERT_TRUE(absl::IsFailedPrecondition(comm.status()));
    EXPECT_NE(comm.status().message().find("without the NCCL communicator"), std::string::npos);
    return;
  }
  if (!torch::cuda::is_available()) GTEST_SKIP() << "built with NCCL; LibTorch sees no GPU";
  auto comm = NewCommunicator(torch::Device(torch::kCUDA, 0), o, *store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE((*comm)->device().is_cuda());
}

TEST(CommunicatorFactoryTest, BuildFlagsAgreeWithLibTorch) {
  // A LibTorch without CUDA never sees a device; one built with CUDA is reported as such.
  if (!TorchHasCuda()) {
    EXPECT_FALSE(torch::cuda::is_available());
  }
  if (torch::cuda::is_available()) {
    EXPECT_TRUE(TorchHasCuda());
  }
}

}  // namespace
}  // namespace zpipe::worker
