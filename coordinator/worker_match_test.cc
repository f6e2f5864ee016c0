// The job/worker matching rule and the waiting reason it produces, on plain registrations.
#include "coordinator/worker_match.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

WorkerCapabilities CpuOnlyTorch() {
  WorkerCapabilities c;
  c.libtorch_version = "1.13.0";
  return c;
}

WorkerCapabilities CudaTorch(int devices) {
  WorkerCapabilities c;
  c.libtorch_version = "2.3.1";
  c.torch_cuda = true;
  c.cuda_device_count = devices;
  c.cuda_runtime_version = "12.1";
  c.nccl = true;
  c.nccl_version = "2.20.5";
  return c;
}

WorkerRegistration Worker(const std::string& name, DeviceKind kind, int index,
                          std::optional<WorkerCapabilities> caps) {
  WorkerRegistration r;
  r.name = name;
  r.device_kind = kind;
  r.device_index = index;
  r.capabilities = std::move(caps);
  return r;
}

JobSpec Job(DeviceKind device, int pipeline) {
  JobSpec s;
  s.device = device;
  s.pipeline = pipeline;
  return s;
}

TEST(WorkerMatchTest, CpuJobsRunOnCpuWorkersWithOrWithoutCapabilities) {
  EXPECT_EQ(CannotRunReason(Worker("a", DeviceKind::kCpu, 0, CpuOnlyTorch()), DeviceKind::kCpu),
            "");
  EXPECT_EQ(CannotRunReason(Worker("a", DeviceKind::kCpu, 1, std::nullopt), DeviceKind::kCpu), "");
  EXPECT_EQ(CannotRunReason(Worker("a", DeviceKind::kCpu, 0, CudaTorch(1)), DeviceKind::kCpu), "");
  // A CUDA worker keeps to CUDA jobs, however capable.
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, CudaTorch(1)), DeviceKind::kCpu),
            "started for cuda:0");
}

TEST(WorkerMatchTest, CudaJobsNeedACudaLibTorchNcclAndTheDevice) {
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, CudaTorch(1)), DeviceKind::kCuda),
            "");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 3, CudaTorch(8)), DeviceKind::kCuda),
            "");
  EXPECT_EQ(CannotRunReason(Worker("c", DeviceKind::kCpu, 0, CudaTorch(1)), DeviceKind::kCuda),
            "started for cpu:0");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, std::nullopt), DeviceKind::kCuda),
            "reported no capabilities (a zpipe-worker older than this coordinator)");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, CpuOnlyTorch()), DeviceKind::kCuda),
            "LibTorch 1.13.0 CPU-only");
  WorkerCapabilities no_nccl = CudaTorch(1);
  no_nccl.nccl = false;
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, no_nccl), DeviceKind::kCuda),
            "built without NCCL");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 0, CudaTorch(0)), DeviceKind::kCuda),
            "LibTorch sees no CUDA device");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 2, CudaTorch(2)), DeviceKind::kCuda),
            "started for cuda:2 but LibTorch sees 2 CUDA devices");
  EXPECT_EQ(CannotRunReason(Worker("g", DeviceKind::kCuda, 1, CudaTorch(1)), DeviceKind::kCuda),
            "started for cuda:1 but LibTorch sees 1 CUDA device");
}

TEST(WorkerMatchTest, WaitingReasonIsUnchangedWhenEveryWorkerFits) {
  const WorkerRegistration a = Worker("a", DeviceKind::kCpu, 0, CpuOnlyTorch());
  EXPECT_EQ(WaitingReason(Job(DeviceKind::kCpu, 2), 1, {&a}),
            "waiting for 2 idle cpu workers (1 available)");
  EXPECT_EQ(WaitingReason(Job(DeviceKind::kCuda, 2), 0, {}),
            "waiting for 2 idle cuda workers (0 available)");
}

TEST(WorkerMatchTest, WaitingReasonNamesTheWorkersThatCannotRunTheJob) {
  const WorkerRegistration w0 = Worker("w0", DeviceKind::kCuda, 0, CpuOnlyTorch());
  EXPECT_EQ(WaitingReason(Job(DeviceKind::kCuda, 2), 0, {&w0}),
            "waiting for 2 idle cuda workers (0 available); 0 of 1 registered worker can run cuda "
            "jobs (w0: LibTorch 1.13.0 CPU-only)");

  const WorkerRegistration g0 = Worker("g0", DeviceKind::kCuda, 0, CudaTorch(1));
  const WorkerRegistration c0 = Worker("c0", DeviceKind::kCpu, 0, CpuOnlyTorch());
  EXPECT_EQ(WaitingReason(Job(DeviceKind::kCuda, 2), 1, {&c0, &g0}),
            "waiting for 2 idle cuda workers (1 available); 1 of 2 registered workers can run "
            "cuda jobs (c0: started for cpu:0)");
}

TEST(WorkerMatchTest, WaitingReasonNamesAtMostFourWorkers) {
  std::vector<WorkerRegistration> workers;
  for (int i = 0; i < 6; ++i) {
    workers.push_back(Worker(absl::StrCat("c", i), DeviceKind::kCpu, i, std::nullopt));
  }
  std::vector<const WorkerRegistration*> live;
  for (const WorkerRegistration& w : workers) live.push_back(&w);
  EXPECT_EQ(WaitingReason(Job(DeviceKind::kCuda, 1), 0, live),
            "waiting for 1 idle cuda workers (0 available); 0 of 6 registered workers can run "
            "cuda jobs (c0: started for cpu:0; c1: started for cpu:1; c2: started for cpu:2; c3: "
            "started for cpu:3; and 2 more)");
}

}  // namespace
}  // namespace zpipe::coordinator
