// Every rank is a thread over one InMemoryStore, talking over loopback,
// parameterised over world size.
#include "worker/comm/tcp_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_error.h"

namespace zpipe::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(rank) for every rank on its own thread and joins them.
void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

CommunicatorOptions Options(int pr, int p, int dr, int d, absl::Duration timeout) {
  CommunicatorOptions o;
  o.pipeline_rank = pr;
  o.pipeline_size = p;
  o.data_rank = dr;
  o.data_size = d;
  o.key_prefix = "job/a1/";
  o.timeout = timeout;
  return o;
}

std::unique_ptr<Communicator> MustConnect(const CommunicatorOptions& o, KeyValueStore& store) {
  auto comm = NewTcpCommunicator(o, store);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

torch::Tensor Pattern(int from, int to, int k, int64_t n) {
  return torch::arange(n, torch::kFloat32) + 1000.0 * from + 100.0 * to + k;
}

class TcpWorldTest : public ::testing::TestWithParam<int> {
 protected:
  int Size() const { return GetParam(); }
};

TEST_P(TcpWorldTest, RingSendRecvManyInFlight) {
  const int n = Size();
  constexpr int kMessages = 24;
  auto store = NewInMemoryStore();
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(rank, n, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<std::unique_ptr<CommHandle>> sends, recvs;
    std::vector<torch::Tensor> got(kMessages);
    for (int k = 0; k < kMessages; ++k) {
      recvs.push_back(comm->Recv({3, 17 + k}, torch::kFloat32, prev, k, &got[k]));
    }
    for (int k = 0; k < kMessages; ++k) {
      sends.push_back(comm->Send(Pattern(rank, next, k, 3 * (17 + k)).view({3, 17 + k}), next, k));
    }
    for (auto& h : sends) EXPECT_TRUE(h->Wait(absl::Seconds(20)).ok());
    for (int k = 0; k < kMessages; ++k) {
      ASSERT_TRUE(recvs[k]->Wait(absl::Seconds(20)).ok());
      EXPECT_TRUE(recvs[k]->Test());
      EXPECT_TRUE(torch::equal(got[k].flatten(), Pattern(prev, rank, k, 3 * (17 + k))))
          << "rank " << rank << " message " << k;
    }
  });
}

// Every ordered pair exchanges in matched order, with the same tag reused for every message
// (tags are allowed but order alone must match them, as NCCL requires).
TEST_P(TcpWorldTest, AllPairsMatchedOrderWithoutDistinctTags) {
  const int n = Size();
  constexpr int kMessages = 8;
  auto store = NewInMemoryStore();
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(rank, n, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    std::vector<std::unique_ptr<CommHandle>> handles;
    std::vector<std::vector<torch::Tensor>> got(n);
    for (int k = 0; k < kMessages; ++k) {
      for (int peer = 0; peer < n; ++peer) {
        if (peer == rank) continue;
        got[peer].push_back(torch::empty({1000}));
        handles.push_back(comm->Recv(got[peer].back(), peer, /*tag=*/0));
        handles.push_back(comm->Send(Pattern(rank, peer, k, 1000), peer, /*tag=*/0));
      }
    }
    for (auto& h : handles) ASSERT_TRUE(h->Wait(absl::Seconds(20)).ok());
    for (int peer = 0; peer < n; ++peer) {
      for (int k = 0; k < static_cast<int>(got[peer].size()); ++k) {
        EXPECT_TRUE(torch::equal(got[peer][k], Pattern(peer, rank, k, 1000)));
      }
    }
  });
}

// Megabyte-sized tensors crossing in both directions with every send posted before any receive:
// the executor's worst case (a send/send crossing must not deadlock or block the caller).
TEST_P(TcpWorldTest, LargeTensorsCrossBothWaysSendsFirst) {
  const int n = Size();
  constexpr int kMessages = 4;
  constexpr int64_t kFloats = 1 << 19;  // 2 MiB
  auto store = NewInMemoryStore();
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(rank, n, 0, 1, absl::Seconds(30)), *store);
    ASSERT_NE(comm, nullptr);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<std::unique_ptr<CommHandle>> sends, recvs;
    const auto before = Clock::now();
    for (int k = 0; k < kMessages; ++k) {
      sends.push_back(comm->Send(Pattern(rank, next, k, kFloats), next, 2 * k));
      if (prev != next) {
        sends.push_back(comm->Send(Pattern(rank, prev, k, kFloats), prev, 2 * k + 1));
      }
    }
    EXPECT_LT(Clock::now() - before, std::chrono::seconds(2));  // posting never waits for peers
    std::vector<torch::Tensor> from_prev, from_next;
    for (int k = 0; k < kMessages; ++k) {
      from_prev.push_back(torch::empty({kFloats}));
      recvs.push_back(comm->Recv(from_prev.back(), prev, 2 * k));
      if (prev != next) {
        from_next.push_back(torch::empty({kFloats}));
        recvs.push_back(comm->Recv(from_next.back(), next, 2 * k + 1));
      }
    }
    for (auto& h : recvs) ASSERT_TRUE(h->Wait(absl::Seconds(30)).ok());
    for (auto& h : sends) ASSERT_TRUE(h->Wait(absl::Seconds(30)).ok());
    for (int k = 0; k < kMessages; ++k) {
      EXPECT_TRUE(torch::equal(from_prev[k], Pattern(prev, rank, k, kFloats)));
      if (prev != next) {
        EXPECT_TRUE(torch::equal(from_next[k], Pattern(next, rank, k, kFloats)));
      }
    }
  });
}

TEST_P(TcpWorldTest, AllReduceAverageIsCorrectOnEveryRank) {
  const int n = Size();
  auto store = NewInMemoryStore();
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(0, 1, rank, n, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    std::vector<torch::Tensor> buffers;
    std::vector<std::unique_ptr<CommHandle>> handles;
    for (int k = 0; k < 6; ++k) {  // several in flight, different sizes
      buffers.push_back(torch::arange(1000 * (k + 1), torch::kFloat32) * (rank + 1) + k);
      handles.push_back(comm->AllReduceAverage(buffers.back()));
    }
    // average over ranks of (i*(r+1) + k) = i * (n+1)/2 + k
    for (int k = 0; k < 6; ++k) {
      ASSERT_TRUE(handles[k]->Wait(absl::Seconds(20)).ok());
      auto want = torch::arange(1000 * (k + 1), torch::kFloat32) * ((n + 1) / 2.0f) + k;
      EXPECT_TRUE(torch::allclose(buffers[k], want, 1e-5, 1e-4)) << "rank " << rank << " k " << k;
      const CommTimes t = handles[k]->times();
      EXPECT_LE(t.start, t.end);
    }
  });
}

// Replicas must step with the same weights: every rank gets the same bits, whatever order the
// sums ran in (random values, where the order of float additions shows).
TEST_P(TcpWorldTest, AllReduceGivesEveryRankTheSameBits) {
  const int n = Size();
  auto store = NewInMemoryStore();
  std::vector<torch::Tensor> results(n);
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(0, 1, rank, n, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    // Irregular values without the global generator (the ranks are threads).
    const auto values = [](int r) {
      return torch::sin(torch::arange(100'003, torch::kFloat32) * (0.37f * (r + 1))) * 1e3f;
    };
    torch::Tensor mine = values(rank);
    torch::Tensor want = torch::zeros_like(mine);
    for (int r = 0; r < n; ++r) want += values(r);
    want /= n;
    ASSERT_TRUE(comm->AllReduceAverage(mine)->Wait(absl::Seconds(20)).ok());
    EXPECT_TRUE(torch::allclose(mine, want, 1e-5, 1e-3)) << "rank " << rank;
    results[rank] = mine;
  });
  for (int r = 1; r < n; ++r) EXPECT_TRUE(torch::equal(results[r], results[0])) << "rank " << r;
}

TEST_P(TcpWorldTest, PipelineAndDataGroupsTogetherWithBarrier) {
  const int d = Size();
  const int p = 2;
  auto store = NewInMemoryStore();
  RunRanks(p * d, [&](int global) {
    const int pr = global % p, dr = global / p;
    auto comm = MustConnect(Options(pr, p, dr, d, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    torch::Tensor grad = torch::full({4096}, static_cast<float>(dr + 10 * pr));
    auto reduce = comm->AllReduceAverage(grad);
    // The pipeline partners exchange one activation each way while the all-reduce runs.
    torch::Tensor got = torch::empty({64});
    auto recv = comm->Recv(got, 1 - pr, 7);
    auto send = comm->Send(torch::full({64}, static_cast<float>(100 * dr + pr)), 1 - pr, 7);
    ASSERT_TRUE(send->Wait().ok());
    ASSERT_TRUE(recv->Wait().ok());
    EXPECT_EQ(got[0].item<float>(), 100.0f * dr + (1 - pr));
    ASSERT_TRUE(reduce->Wait().ok());
    EXPECT_FLOAT_EQ(grad[4095].item<float>(), (d - 1) / 2.0f + 10 * pr);
    ASSERT_TRUE(comm->Barrier().ok());
  });
}

// The all-reduce runs on the communicator's thread: the call returns before the reduce ends and
// the caller computes meanwhile.
TEST_P(TcpWorldTest, AllReduceOverlapsTheCallersCompute) {
  const int n = Size();
  auto store = NewInMemoryStore();
  RunRanks(n, [&](int rank) {
    auto comm = MustConnect(Options(0, 1, rank, n, absl::Seconds(30)), *store);
    ASSERT_NE(comm, nullptr);
    torch::Tensor big = torch::full({1 << 22}, static_cast<float>(rank));
    const auto before = Clock::now();
    auto handle = comm->AllReduceAverage(big);
    const auto returned = Clock::now();
    EXPECT_LT(returned - before, std::chrono::milliseconds(50));
    // "Compute" while it runs; the handle can be polled without blocking.
    double acc = 0;
    int polls = 0;
    while (!handle->Test()) {
      for (int i = 0; i < 1000; ++i) acc += i * 1e-9;
      ++polls;
    }
    ASSERT_TRUE(handle->Wait(absl::ZeroDuration()).ok());
    EXPECT_GT(handle->times().end, returned);
    EXPECT_FLOAT_EQ(big[0].item<float>(), (n - 1) / 2.0f);
    EXPECT_GE(acc, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSize, TcpWorldTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat("n", info.param); });

TEST(TcpFailureTest, PeerThatNeverShowsUpFailsWithinTheTimeout) {
  auto store = NewInMemoryStore();
  const auto start = Clock::now();
  auto comm = NewTcpCommunicator(Options(0, 2, 0, 1, absl::Milliseconds(300)), *store);
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_NE(comm.status().message().find("pipeline"), std::string::npos) << comm.status();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// p = 2, d = 2: three ranks enter a barrier, the fourth never does. The three give up after the
// timeout; on the streams (whose barrier goes through the store) they name the missing rank.
TEST(TcpFailureTest, ARankThatNeverEntersTheBarrierIsNamed) {
  auto store = NewInMemoryStore();
  RunRanks(4, [&](int g) {
    const int pr = g % 2, dr = g / 2;
    auto comm = MustConnect(Options(pr, 2, dr, 2, absl::Milliseconds(600)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());  // all four: it works
    if (g == 3) {
      absl::SleepFor(absl::Seconds(1.5));  // alive, but skips the second barrier
      return;
    }
    const auto start = Clock::now();
    absl::Status s = comm->Barrier();
    EXPECT_FALSE(s.ok());
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("rank (1, 1) to enter"), std::string::npos) << s;
  });
}

TEST(TcpFailureTest, PeerThatNeverSendsTimesOut) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Milliseconds(500)), *store);
    ASSERT_NE(comm, nullptr);
    if (rank == 0) {
      const auto start = Clock::now();
      auto recv = comm->Recv(torch::empty({16}), 1, 0);
      absl::Status s = recv->Wait(absl::Seconds(30));
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_TRUE(IsPeerLost(s)) << "a silent peer is the cause, not this rank";
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    } else {
      absl::SleepFor(absl::Seconds(1.5));  // alive, but sends nothing
    }
  });
}

TEST(TcpFailureTest, PeerThatDiesFailsPendingRecvAndAllReduce) {
  auto store = NewInMemoryStore();
  // p = 2, d = 2: global 0 = (0,0), 1 = (1,0), 2 = (0,1), 3 = (1,1). (1,0) dies after connecting;
  // (0,0) waits on a recv from it and (1,1) on an all-reduce with it.
  std::atomic<int> connected{0};
  RunRanks(4, [&](int global) {
    const int pr = global % 2, dr = global / 2;
    auto comm = MustConnect(Options(pr, 2, dr, 2, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ++connected;
    while (connected.load() < 4) std::this_thread::yield();
    const auto start = Clock::now();
    if (global == 1) {
      absl::SleepFor(absl::Milliseconds(200));
      comm.reset();  // dies: its connections close
      return;
    }
    if (global == 0) {
      auto recv = comm->Recv(torch::empty({16}), 1, 0);
      absl::Status s = recv->Wait(absl::Seconds(30));
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(IsPeerLost(s)) << s;  // the RankFailure says so (peer_lost)
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << s;
    }
    if (global == 3) {
      auto reduce = comm->AllReduceAverage(torch::ones({1024}));
      absl::Status s = reduce->Wait(absl::Seconds(30));
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(IsPeerLost(s)) << s;
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << s;
    }
  });
}

TEST(TcpFailureTest, DestroyingTheCommunicatorCancelsPendingOps) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      auto recv = comm->Recv(torch::empty({16}), 1, 3);
      comm.reset();
      absl::Status s = recv->Wait(absl::Seconds(5));
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(recv->Test());
    }
  });
}

// A receive is waited for on the caller's thread: a Wait shorter than the communicator's
// timeout gives up on time with the receive still pending,
// without failing the connection, and the same handle then completes with the data. The executor
// waits in such slices (to notice a cancel), so this is its normal path.
TEST(TcpReceiveTest, ShortWaitsGiveUpOnTimeAndTheReceiveStillCompletes) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      torch::Tensor got = torch::zeros({1 << 16});
      auto recv = comm->Recv(got, 1, 5);
      EXPECT_TRUE(absl::IsDeadlineExceeded(recv->Wait(absl::ZeroDuration())));
      for (int k = 0; k < 3; ++k) {
        const auto start = Clock::now();
        absl::Status s = recv->Wait(absl::Milliseconds(40));
        const auto waited = Clock::now() - start;
        EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
        EXPECT_GE(waited, std::chrono::milliseconds(39));
        EXPECT_LT(waited, std::chrono::milliseconds(1000));
        EXPECT_FALSE(recv->Test());
      }
      ASSERT_TRUE(comm->Barrier().ok());  // now rank 1 sends
      ASSERT_TRUE(recv->Wait(absl::Seconds(20)).ok());
      EXPECT_TRUE(recv->Test());
      EXPECT_TRUE(torch::equal(got, Pattern(1, 0, 5, 1 << 16)));
      EXPECT_GE(recv->times().end, recv->times().start);
      // The connection still works both ways after the slices.
      torch::Tensor back = torch::zeros({8});
      ASSERT_TRUE(comm->Recv(back, 1, 6)->Wait(absl::Seconds(20)).ok());
      EXPECT_TRUE(torch::equal(back, Pattern(1, 0, 6, 8)));
    } else {
      ASSERT_TRUE(comm->Barrier().ok());
      ASSERT_TRUE(comm->Send(Pattern(1, 0, 5, 1 << 16), 0, 5)->Wait(absl::Seconds(20)).ok());
      ASSERT_TRUE(comm->Send(Pattern(1, 0, 6, 8), 0, 6)->Wait(absl::Seconds(20)).ok());
    }
  });
}

// Two threads waiting on one receive handle: both see it complete (one reads the bytes, the
// other waits for the first's result).
TEST(TcpReceiveTest, TwoThreadsWaitingOnOneReceiveBothSeeIt) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    if (rank == 0) {
      torch::Tensor got = torch::zeros({1024});
      auto recv = comm->Recv(got, 1, 0);
      std::atomic<int> ok{0};
      std::vector<std::thread> waiters;
      for (int t = 0; t < 2; ++t) {
        waiters.emplace_back([&] {
          while (true) {
            absl::Status s = recv->Wait(absl::Milliseconds(30));
            if (s.ok()) break;
            if (!absl::IsDeadlineExceeded(s)) return;
          }
          ++ok;
        });
      }
      ASSERT_TRUE(comm->Barrier().ok());
      for (auto& w : waiters) w.join();
      EXPECT_EQ(ok.load(), 2);
      EXPECT_TRUE(torch::equal(got, Pattern(1, 0, 0, 1024)));
    } else {
      absl::SleepFor(absl::Milliseconds(100));  // both waiters are in by now
      ASSERT_TRUE(comm->Barrier().ok());
      ASSERT_TRUE(comm->Send(Pattern(1, 0, 0, 1024), 0, 0)->Wait(absl::Seconds(20)).ok());
    }
  });
}

// Flush hands queued sends to the communicator's own thread: sends nobody waits for go out (their
// handles turn done without a Wait).
TEST(TcpPostingTest, OpsNobodyWaitsForStillGoOut) {
  auto store = NewInMemoryStore();
  constexpr int kMessages = 8;
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 1) {
      std::vector<std::unique_ptr<CommHandle>> sends;
      for (int k = 0; k < kMessages; ++k) {
        sends.push_back(comm->Send(Pattern(1, 0, k, 1024 << k), 0, k));
      }
      comm->Flush();
      const auto deadline = Clock::now() + std::chrono::seconds(15);
      int done = 0;
      while (done < kMessages && Clock::now() < deadline) {
        done = 0;
        for (auto& s : sends) done += s->Test() ? 1 : 0;
        absl::SleepFor(absl::Milliseconds(1));
      }
      EXPECT_EQ(done, kMessages) << "sends still pending with nobody waiting on them";
      for (auto& s : sends) EXPECT_TRUE(s->Wait(absl::ZeroDuration()).ok());
    } else {
      std::vector<torch::Tensor> got;
      std::vector<std::unique_ptr<CommHandle>> recvs;
      for (int k = 0; k < kMessages; ++k) {
        got.push_back(torch::zeros({1024 << k}));
        recvs.push_back(comm->Recv(got.back(), 1, k));
      }
      for (int k = kMessages - 1; k >= 0; --k) {  // waited for in the reverse order
        ASSERT_TRUE(recvs[k]->Wait(absl::Seconds(15)).ok()) << k;
        EXPECT_TRUE(torch::equal(got[k], Pattern(1, 0, k, 1024 << k))) << k;
      }
    }
    ASSERT_TRUE(comm->Barrier().ok());
  });
}

// Destroying the communicator while a thread waits on a receive wakes it with CANCELLED.
TEST(TcpReceiveTest, DestroyingTheCommunicatorWakesAWaitingReceiver) {
  auto store = NewInMemoryStore();
  std::atomic<bool> done{false};  // rank 1 stays connected until rank 0 is through
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank != 0) {
      while (!done.load()) absl::SleepFor(absl::Milliseconds(5));
      return;
    }
    auto recv = comm->Recv(torch::empty({16}), 1, 3);
    absl::Status got;
    std::thread waiter([&] { got = recv->Wait(absl::Seconds(15)); });
    absl::SleepFor(absl::Milliseconds(100));
    const auto start = Clock::now();
    comm.reset();
    waiter.join();
    done = true;
    EXPECT_TRUE(absl::IsCancelled(got)) << got;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  });
}

// A ring where every rank waits for its send before its receive, with messages larger than the
// sockets hold: each send completes only if the peer reads while its own thread waits on a send
// (a receive posted and not yet waited for must still drain).
TEST(TcpPostingTest, WaitingOnASendKeepsPostedReceivesDraining) {
  constexpr int kRanks = 3;
  constexpr int64_t kFloats = 4 << 20;  // 16 MiB
  auto store = NewInMemoryStore();
  RunRanks(kRanks, [&](int rank) {
    auto comm = MustConnect(Options(rank, kRanks, 0, 1, absl::Seconds(30)), *store);
    ASSERT_NE(comm, nullptr);
    const int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    torch::Tensor got = torch::zeros({kFloats});
    auto recv = comm->Recv(got, prev, 1);
    auto send = comm->Send(Pattern(rank, next, 1, kFloats), next, 1);
    ASSERT_TRUE(send->Wait(absl::Seconds(30)).ok());
    ASSERT_TRUE(recv->Wait(absl::Seconds(30)).ok());
    EXPECT_TRUE(torch::equal(got, Pattern(prev, rank, 1, kFloats)));
  });
}

TEST(TcpArgumentTest, BadCallsFailTheirHandleNotTheProcess) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto comm = MustConnect(Options(rank, 2, 0, 1, absl::Seconds(20)), *store);
    ASSERT_NE(comm, nullptr);
    EXPECT_TRUE(absl::IsInvalidArgument(comm->Send(torch::ones({2}), rank, 0)->Wait()));
    EXPECT_TRUE(absl::IsInvalidArgument(comm->Send(torch::ones({2}), 5, 0)->Wait()));
    EXPECT_TRUE(absl::IsInvalidArgument(comm->Send(torch::ones({2}), 1 - rank, -1)->Wait()));
    EXPECT_TRUE(absl::IsInvalidArgument(comm->Recv(torch::ones({4, 4}).t(), 1 - rank, 0)->Wait()));
    EXPECT_TRUE(
        absl::IsInvalidArgument(comm->AllReduceAverage(torch::ones({2}, torch::kFloat64))->Wait()));
    // d = 1: the average of one replica is itself.
    torch::Tensor t = torch::full({3}, 5.0f);
    EXPECT_TRUE(comm->AllReduceAverage(t)->Wait().ok());
    EXPECT_FLOAT_EQ(t[2].item<float>(), 5.0f);
  });
}

// A worker of an earlier release started with --transport gloo publishes "gloo" where the
// streams' ranks publish their addresses: both orders fail at once, naming the flag.
TEST(TcpArgumentTest, AWorkerOfAnEarlierReleaseOnGlooFailsNamingTheFlag) {
  for (int gloo_rank : {0, 1}) {
    auto store = NewInMemoryStore();
    ASSERT_TRUE(store->Set(absl::StrCat("job/a1/p2p/0/", gloo_rank), "gloo").ok());
    const int rank = 1 - gloo_rank;
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = NewTcpCommunicator(Options(rank, 2, 0, 1, absl::Seconds(5)), *store);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << "rank " << rank;
    EXPECT_TRUE(absl::IsFailedPrecondition(comm.status())) << comm.status();
    EXPECT_NE(comm.status().message().find("--transport"), std::string::npos) << comm.status();
  }
}

TEST(TcpArgumentTest, InconsistentRanksAreRejected) {
  auto store = NewInMemoryStore();
  EXPECT_TRUE(absl::IsInvalidArgument(
      NewTcpCommunicator(Options(2, 2, 0, 1, absl::Seconds(1)), *store).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      NewTcpCommunicator(Options(0, 1, 0, 0, absl::Seconds(1)), *store).status()));
}

}  // namespace
}  // namespace zpipe::worker
