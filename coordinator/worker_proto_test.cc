// The worker-service adapters: capabilities travel from registration to the listed worker, and a
// registration without them stays without.
#include "coordinator/worker_proto.h"

#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

TEST(WorkerProtoTest, CapabilitiesRoundTripFromRegistrationToListing) {
  v1::RegisterWorkerRequest req;
  req.set_name("g0");
  req.set_device_kind(v1::DEVICE_KIND_CUDA);
  v1::WorkerCapabilities* caps = req.mutable_capabilities();
  caps->set_libtorch_version("2.3.1");
  caps->set_torch_cuda(true);
  caps->set_cuda_device_count(2);
  caps->set_cuda_runtime_version("12.1");
  caps->set_nccl(true);
  caps->set_nccl_version("2.20.5");
  v1::CudaDevice* d = caps->add_devices();
  d->set_index(1);
  d->set_name("NVIDIA H100");
  d->set_total_memory_bytes(80ull << 30);
  caps->set_probe_error("none");

  absl::StatusOr<WorkerRegistration> reg = RegistrationFromProto(req);
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_TRUE(reg->capabilities.has_value());
  EXPECT_TRUE(reg->capabilities->torch_cuda);
  ASSERT_EQ(reg->capabilities->devices.size(), 1u);
  EXPECT_EQ(reg->capabilities->devices[0], (CudaDeviceInfo{1, "NVIDIA H100", 80ull << 30}));

  WorkerInfo info;
  info.registration = *reg;
  const v1::Worker listed = WorkerInfoToProto(info);
  ASSERT_TRUE(listed.has_capabilities());
  EXPECT_EQ(listed.capabilities().SerializeAsString(), caps->SerializeAsString());
}

TEST(WorkerProtoTest, RegistrationWithoutCapabilitiesListsNone) {
  v1::RegisterWorkerRequest req;
  req.set_name("old");
  req.set_device_kind(v1::DEVICE_KIND_CPU);
  absl::StatusOr<WorkerRegistration> reg = RegistrationFromProto(req);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_FALSE(reg->capabilities.has_value());
  WorkerInfo info;
  info.registration = *reg;
  EXPECT_FALSE(WorkerInfoToProto(info).has_capabilities());
}

}  // namespace
}  // namespace zpipe::coordinator
