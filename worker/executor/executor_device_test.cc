// The executor off the CPU-only path: device timers, bf16 autocast, and whole pipelines run as
// separate processes (zpipe-pipeline-rank) that meet through a file store and talk over the TCP streams. The CUDA
// tests skip where LibTorch sees no CUDA device; the rest run everywhere.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/executor/device_timer.h"
#include "worker/executor/executor.h"

extern char** environ;

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;

#define ZPIPE_REQUIRE_CUDA()                                                          \
  do {                                                                                \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees no CUDA device"; \
  } while (0)

struct RankRun {
  std::vector<double> losses;  // per iteration, from the rank with the last stage
  std::vector<double> busy_s, duration_s;
};

// Runs `p` zpipe-pipeline-rank processes with `args` and collects their outputs.
RankRun RunRanks(int p, const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/zpipe-device-test-XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  std::vector<pid_t> pids;
  for (int r = 0; r < p; ++r) {
    std::vector<std::string> argv = {ZPIPE_PIPELINE_RANK_BIN,
                                     "--rank",
                                     std::to_string(r),
                                     "--pipeline",
                                     std::to_string(p),
                                     "--store",
                                     (dir / "store").string(),
                                     "--out",
                                     (dir / absl::StrCat("rank", r, ".jsonl")).string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, cargv[0], nullptr, nullptr, cargv.data(), environ), 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank failed: see stderr";
  }
  RankRun run;
  const std::regex loss(R"("loss":([-0-9.eE+]+))"), busy(R"("busy_s":([-0-9.eE+]+))"),
      duration(R"("duration_s":([-0-9.eE+]+))");
  for (int r = 0; r < p; ++r) {
    std::ifstream in(dir / absl::StrCat("rank", r, ".jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_search(line, m, loss)) run.losses.push_back(std::stod(m[1]));
      if (r == 0 && std::regex_search(line, m, busy)) run.busy_s.push_back(std::stod(m[1]));
      if (r == 0 && std::regex_search(line, m, duration)) {
        run.duration_s.push_back(std::stod(m[1]));
      }
    }
  }
  fs::remove_all(dir);
  return run;
}

TEST(DeviceTimerTest, HostTimerReadsTheHostClockAtEachMark) {
  auto timer = NewHostTimer();
  EXPECT_FALSE(timer->deferred());
  ASSERT_TRUE(timer->Begin().ok());
  EXPECT_EQ(timer->Mark(), 0);
  EXPECT_EQ(timer->Mark(), 1);
  auto marks = timer->Resolve();
  ASSERT_TRUE(marks.ok());
  ASSERT_EQ(marks->size(), 2u);
  EXPECT_LE((*marks)[0], (*marks)[1]);
  ASSERT_TRUE(timer->Begin().ok());
  EXPECT_EQ(timer->Mark(), 0);
}

TEST(DeviceTimerTest, CudaTimerRefusesACpuDevice) {
  auto timer = NewCudaTimer(torch::kCPU);
  ASSERT_FALSE(timer.ok());
  EXPECT_NE(timer.status().message().find("not a CUDA device"), std::string::npos);
  auto host = NewDeviceTimer(torch::kCPU);
  ASSERT_TRUE(host.ok());
  EXPECT_FALSE((*host)->deferred());
}

TEST(DeviceTimerTest, CudaTimerTimesTheKernelsNotTheirLaunch) {
  ZPIPE_REQUIRE_CUDA();
  auto timer = NewCudaTimer(torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE(timer.ok()) << timer.status();
  EXPECT_TRUE((*timer)->deferred());
  torch::Tensor a = torch::randn({4096, 4096}, torch::Device(torch::kCUDA, 0));
  ASSERT_TRUE((*timer)->Begin().ok());
  const auto host0 = std::chrono::steady_clock::now();
  const int start = (*timer)->Mark();
  torch::Tensor c = a;
  for (int i = 0; i < 20; ++i) c = torch::mm(c, a).div_(64);
  const int end = (*timer)->Mark();
  const double launch_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - host0).count();
  auto marks = (*timer)->Resolve();
  ASSERT_TRUE(marks.ok()) << marks.status();
  const double device_s = std::chrono::duration<double>((*marks)[end] - (*marks)[start]).count();
  // 20 products of 4096^3 (2.7 TFLOP in all) take milliseconds on any GPU; queueing them takes
  // far less, and the device interval starts no earlier than the host reference.
  EXPECT_GT(device_s, 0);
  EXPECT_GE((*marks)[start], host0 - std::chrono::milliseconds(5));
  std::printf("20 x mm(4096^2): launched in %.3f ms, ran %.3f ms on the device\n", launch_s * 1e3,
              device_s * 1e3);
  EXPECT_TRUE(torch::isfinite(c).all().item<bool>());
}

TEST(ExecutorProcessesTest, TwoProcessesOnTheCpuTrain) {
  const RankRun run = RunRanks(2, {"--device", "cpu", "--iterations", "3", "--schedule", "zb-h1"});
  ASSERT_EQ(run.losses.size(), 3u);
  for (double l : run.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_NEAR(run.losses[0], std::log(128.0), 0.3);  // untrained: about ln(vocab)
}

TEST(ExecutorProcessesTest, TwoProcessesSharingOneGpuMatchTheCpu) {
  ZPIPE_REQUIRE_CUDA();
  const std::vector<std::string> common = {"--iterations",   "5", "--schedule", "zb-h1",
                                           "--microbatches", "4"};
  std::vector<std::string> cpu = common, gpu = common;
  cpu.insert(cpu.end(), {"--device", "cpu"});
  gpu.insert(gpu.end(), {"--device", "cuda:0"});
  const RankRun on_cpu = RunRanks(2, cpu);
  const RankRun on_gpu = RunRanks(2, gpu);
  ASSERT_EQ(on_cpu.losses.size(), 5u);
  ASSERT_EQ(on_gpu.losses.size(), 5u);
  for (int it = 0; it < 5; ++it) {
    EXPECT_NEAR(on_gpu.losses[it], on_cpu.losses[it], 1e-4 * on_cpu.losses[it])
        << "iteration " << it;
  }
  // CUDA events time the GPU's work: busy never exceeds the iteration's span.
  for (size_t it = 0; it < on_gpu.busy_s.size(); ++it) {
    EXPECT_GT(on_gpu.busy_s[it], 0);
    EXPECT_LE(on_gpu.busy_s[it], on_gpu.duration_s[it] + 1e-6);
  }
}

// bf16 autocast with fp32 master weights: the loss falls about as fast as in fp32.
void ExpectBf16Trains(const std::string& device) {
  const std::vector<std::string> args = {"--device",   device, "--iterations", "30",
                                         "--schedule", "1f1b", "--lr",         "0.003"};
  std::vector<std::string> bf16 = args, fp32 = args;
  bf16.insert(bf16.end(), {"--precision", "bf16"});
  fp32.insert(fp32.end(), {"--precision", "fp32"});
  const RankRun b = RunRanks(1, bf16);
  const RankRun f = RunRanks(1, fp32);
  ASSERT_EQ(b.losses.size(), 30u);
  ASSERT_EQ(f.losses.size(), 30u);
  EXPECT_LT(b.losses.back(), b.losses.front() - 1.0) << "bf16 loss did not fall";
  EXPECT_NEAR(b.losses.back(), f.losses.back(), 0.1 * f.losses.back());
  std::printf("%s: loss %.4f -> %.4f in bf16, %.4f -> %.4f in fp32\n", device.c_str(),
              b.losses.front(), b.losses.back(), f.losses.front(), f.losses.back());
}

TEST(ExecutorPrecisionTest, Bf16TrainsOnTheCpu) { ExpectBf16Trains("cpu"); }

TEST(ExecutorPrecisionTest, Bf16TrainsOnTheGpu) {
  ZPIPE_REQUIRE_CUDA();
  ExpectBf16Trains("cuda:0");
}

}  // namespace
}  // namespace zpipe::worker
