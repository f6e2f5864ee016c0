// Capability reporting: the pure builder on described machines, and the probe on this one.
#include "worker/daemon/capabilities.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include "gtest/gtest.h"

namespace zpipe::worker {
namespace {

TEST(CapabilitiesTest, VersionNames) {
  EXPECT_EQ(CudaVersionName(12010), "12.1");
  EXPECT_EQ(CudaVersionName(11080), "11.8");
  EXPECT_EQ(CudaVersionName(13000), "13.0");
  EXPECT_EQ(CudaVersionName(0), "");
  EXPECT_EQ(NcclVersionName(22809), "2.28.9");
  EXPECT_EQ(NcclVersionName(21803), "2.18.3");
  EXPECT_EQ(NcclVersionName(2708), "2.7.8");  // the code before NCCL 2.9
  EXPECT_EQ(NcclVersionName(0), "");
}

TEST(CapabilitiesTest, CpuOnlyLibTorchWithoutNccl) {
  RuntimeFacts facts;
  facts.libtorch_version = "1.13.0";
  const v1::WorkerCapabilities c = BuildCapabilities(facts);
  EXPECT_EQ(c.libtorch_version(), "1.13.0");
  EXPECT_FALSE(c.torch_cuda());
  EXPECT_EQ(c.cuda_device_count(), 0);
  EXPECT_EQ(c.cuda_runtime_version(), "");
  EXPECT_FALSE(c.nccl());
  EXPECT_EQ(c.nccl_version(), "");
  EXPECT_EQ(c.devices_size(), 0);
  EXPECT_EQ(c.probe_error(), "");
  EXPECT_EQ(DescribeCapabilities(c),
            "LibTorch 1.13.0 CPU-only, no NCCL, 0 CUDA devices seen by LibTorch");
}

TEST(CapabilitiesTest, CudaLibTorchWithNcclAndTwoGpus) {
  RuntimeFacts facts;
  facts.libtorch_version = "2.3.1";
  facts.torch_cuda = true;
  facts.torch_cudart_version = 12010;
  facts.torch_device_count = 2;
  facts.nccl = true;
  facts.nccl_version = 22005;
  facts.cudart_version = 12040;  // the runtime loaded wins over the one LibTorch was built with
  facts.devices = {{0, "NVIDIA H100 80GB HBM3", 85ull << 30},
                   {1, "NVIDIA H100 80GB HBM3", 85ull << 30}};
  const v1::WorkerCapabilities c = BuildCapabilities(facts);
  EXPECT_TRUE(c.torch_cuda());
  EXPECT_EQ(c.cuda_device_count(), 2);
  EXPECT_EQ(c.cuda_runtime_version(), "12.4");
  EXPECT_TRUE(c.nccl());
  EXPECT_EQ(c.nccl_version(), "2.20.5");
  ASSERT_EQ(c.devices_size(), 2);
  EXPECT_EQ(c.devices(1).index(), 1);
  EXPECT_EQ(c.devices(1).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c.devices(1).total_memory_bytes(), 85ull << 30);

  facts.cudart_version = 0;  // no runtime probe (built without NCCL): LibTorch's
  facts.nccl = false;
  EXPECT_EQ(BuildCapabilities(facts).cuda_runtime_version(), "12.1");
}

TEST(CapabilitiesTest, DevicesLibTorchCannotUseAreNotCounted) {
  RuntimeFacts facts;
  facts.libtorch_version = "1.13.0";
  facts.torch_device_count = 1;  // cannot happen with torch_cuda unset; the builder trusts only it
  facts.nccl = true;
  facts.nccl_version = 22809;
  facts.cudart_version = 13000;
  facts.devices = {{0, "NVIDIA H200", 141ull << 30}};
  const v1::WorkerCapabilities c = BuildCapabilities(facts);
  EXPECT_EQ(c.cuda_device_count(), 0);
  EXPECT_EQ(c.devices_size(), 1);  // the runtime's list is reported as found
  EXPECT_EQ(DescribeCapabilities(c),
            "LibTorch 1.13.0 CPU-only, NCCL 2.28.9, CUDA runtime 13.0, 0 CUDA devices seen by "
            "LibTorch; cuda:0 NVIDIA H200 144384 MiB");
}

TEST(CapabilitiesTest, ProbeErrorsAreJoinedAndBounded) {
  RuntimeFacts facts;
  facts.errors = {"cudaGetDeviceCount: no CUDA-capable device is detected", "ncclGetVersion: x"};
  EXPECT_EQ(BuildCapabilities(facts).probe_error(),
            "cudaGetDeviceCount: no CUDA-capable device is detected; ncclGetVersion: x");
  facts.errors = {std::string(5000, 'e')};
  const std::string error = BuildCapabilities(facts).probe_error();
  EXPECT_EQ(error.size(), 1000u);
  EXPECT_EQ(error.substr(997), "...");
}

// This process: the LibTorch it is linked with, and the NCCL communicator exactly when built in.
TEST(CapabilitiesTest, ProbeReportsThisBuild) {
  const RuntimeFacts facts = ProbeRuntime();
  EXPECT_EQ(facts.libtorch_version, TORCH_VERSION);
  EXPECT_EQ(facts.torch_cuda, facts.torch_cudart_version > 0);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(facts.torch_device_count, 0);
  }
#ifdef ZPIPE_WITH_NCCL
  EXPECT_TRUE(facts.nccl);
  EXPECT_GT(facts.nccl_version, 0);
  EXPECT_GT(facts.cudart_version, 0);
  // Either the runtime lists devices or says why not.
  EXPECT_TRUE(!facts.devices.empty() || !facts.errors.empty());
#else
  EXPECT_FALSE(facts.nccl);
  EXPECT_TRUE(facts.devices.empty());
#endif
  const v1::WorkerCapabilities c = BuildCapabilities(facts);
  EXPECT_EQ(c.libtorch_version(), TORCH_VERSION);
  std::cerr << "this worker: " << DescribeCapabilities(c) << "\n";
}

}  // namespace
}  // namespace zpipe::worker
