// NCCL needs one GPU per rank: every test skips cleanly where there are not enough devices (or
// LibTorch has no CUDA), so the binary passes on CPU-only machines.
#include "worker/comm/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

namespace zpipe::worker {
namespace {

int UsableGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  if (!torch::cuda::is_available()) return 0;
  return count;
}

#define ZPIPE_REQUIRE_GPUS(n)                                                     \
  do {                                                                            \
    if (UsableGpus() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s)"; \
  } while (0)

void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

CommunicatorOptions Options(int pr, int p, int dr, int d, int device, absl::Duration timeout) {
  CommunicatorOptions o;
  o.pipeline_rank = pr;
  o.pipeline_size = p;
  o.data_rank = dr;
  o.data_size = d;
  o.device_index = device;
  o.key_prefix = "nccl-test/";
  o.timeout = timeout;
  return o;
}

TEST(NcclCommunicatorTest, SingleRankHasNoPeersAndAveragesTrivially) {
  ZPIPE_REQUIRE_GPUS(1);
  auto store = NewInMemoryStore();
  auto comm = NewNcclCommunicator(Options(0, 1, 0, 1, 0, absl::Seconds(30)), *store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  torch::Tensor t = torch::full({8}, 3.0f, torch::Device(torch::kCUDA, 0));
  EXPECT_TRUE((*comm)->AllReduceAverage(t)->Wait().ok());
  EXPECT_FLOAT_EQ(t[0].item<float>(), 3.0f);
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->Send(t, 1, 0)->Wait()));
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->AllReduceAverage(t.cpu())->Wait()));
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(NcclCommunicatorTest, PeerThatNeverShowsUpFailsWithinTheTimeout) {
  ZPIPE_REQUIRE_GPUS(1);
  auto store = NewInMemoryStore();
  auto comm = NewNcclCommunicator(Options(0, 2, 0, 1, 0, absl::Milliseconds(500)), *store);
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
}

TEST(NcclCommunicatorTest, PipelineSendRecvInMatchedOrderBothWays) {
  ZPIPE_REQUIRE_GPUS(2);
  constexpr int kMessages = 16;
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = NewNcclCommunicator(Options(rank, 2, 0, 1, rank, absl::Seconds(60)), *store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    const torch::Device dev(torch::kCUDA, rank);
    const int peer = 1 - rank;
    std::vector<std::unique_ptr<CommHandle>> handles;
    std::vector<torch::Tensor> got;
    for (int k = 0; k < kMessages; ++k) {  // both ranks send first: needs per-direction streams
      handles.push_back((*comm)->Send(torch::full({1024 + k}, 100.0f * rank + k, dev), peer, k));
      got.push_back(torch::empty({1024 + k}, dev));
      handles.push_back((*comm)->Recv(got.back(), peer, k));
    }
    for (auto& h : handles) ASSERT_TRUE(h->Wait(absl::Seconds(60)).ok());
    for (int k = 0; k < kMessages; ++k) {
      EXPECT_FLOAT_EQ(got[k][1023].item<float>(), 100.0f * peer + k);
    }
  });
}

TEST(NcclCommunicatorTest, AllReduceAverageAcrossTheDataParallelGroup) {
  ZPIPE_REQUIRE_GPUS(2);
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = NewNcclCommunicator(Options(0, 1, rank, 2, rank, absl::Seconds(60)), *store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    torch::Tensor t =
        torch::full({1 << 20}, static_cast<float>(rank + 1), torch::Device(torch::kCUDA, rank));
    auto h = (*comm)->AllReduceAverage(t);
    ASSERT_TRUE(h->Wait(absl::Seconds(60)).ok());
    EXPECT_FLOAT_EQ(t[12345].item<float>(), 1.5f);
    EXPECT_LE(h->times().start, h->times().end);
    EXPECT_TRUE((*comm)->Barrier().ok());
  });
}

// p = 4: neighbours use pair communicators, rank 0 <-> rank 2 the whole-pipeline one.
TEST(NcclCommunicatorTest, NonNeighbourGatherOnRankZero) {
  ZPIPE_REQUIRE_GPUS(4);
  auto store = NewInMemoryStore();
  RunRanks(4, [&](int rank) {
    auto comm = NewNcclCommunicator(Options(rank, 4, 0, 1, rank, absl::Seconds(60)), *store);
    ASSERT_TRUE(comm.ok()) << comm.status();
    const torch::Device dev(torch::kCUDA, rank);
    if (rank == 0) {
      for (int r = 1; r < 4; ++r) {
        torch::Tensor got = torch::empty({4}, dev);
        ASSERT_TRUE((*comm)->Recv(got, r, 9)->Wait(absl::Seconds(60)).ok());
        EXPECT_FLOAT_EQ(got[3].item<float>(), static_cast<float>(r));
      }
    } else {
      ASSERT_TRUE(
          (*comm)->Send(torch::full({4}, static_cast<float>(rank), dev), 0, 9)->Wait().ok());
    }
  });
}

}  // namespace
}  // namespace zpipe::worker
