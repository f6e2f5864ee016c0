// ZeroPipe's own point-to-point streams (tcp_p2p.h) beneath the Communicator: what only this layer
// does. What the communicator does with them is tested through it in tcp_communicator_test.cc.
// Every rank is a thread, over loopback.
#include "worker/comm/tcp_p2p.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace zpipe::worker::internal {
namespace {

using Clock = std::chrono::steady_clock;

void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

TcpP2pOptions Options(int rank, int size, absl::Duration timeout = absl::Seconds(20)) {
  TcpP2pOptions o;
  o.rank = rank;
  o.size = size;
  o.key_prefix = "job/a1/p2p/0/";
  o.timeout = timeout;
  return o;
}

std::unique_ptr<TcpP2p> MustConnect(const TcpP2pOptions& o, KeyValueStore& store) {
  auto p = TcpP2p::Connect(o, store);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

TEST(TcpP2pConnectTest, MissingRanksAreNamedWhenTheyDoNotShowUp) {
  auto store = NewInMemoryStore();
  const auto start = Clock::now();
  auto p = TcpP2p::Connect(Options(0, 3, absl::Milliseconds(300)), *store);
  EXPECT_TRUE(absl::IsDeadlineExceeded(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("ranks 1, 2 did not connect"), std::string::npos)
      << p.status();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));

  // Rank 2 of 3, with ranks 0 and 1 absent: it waits for their addresses.
  auto q = TcpP2p::Connect(Options(2, 3, absl::Milliseconds(300)), *NewInMemoryStore());
  EXPECT_TRUE(absl::IsDeadlineExceeded(q.status())) << q.status();
  EXPECT_NE(q.status().message().find("ranks 0, 1 did not publish"), std::string::npos)
      << q.status();
}

// Something that is not a rank of this group (a port scanner, a rank of another job) connects to
// rank 0's port first: it is dropped and the group still assembles.
TEST(TcpP2pConnectTest, StrayConnectionsAreIgnored) {
  auto store = NewInMemoryStore();
  std::atomic<bool> stray_done{false};
  std::thread stray([&] {
    auto addr = store->Wait({"job/a1/p2p/0/0"}, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(addr.ok()) << addr.status();
    std::vector<std::string> parts = absl::StrSplit((*addr)[0], ' ');
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(parts[1], &port));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, parts[0].c_str(), &in.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&in), sizeof(in)), 0);
    const char junk[16] = "GET / HTTP/1.0";
    ASSERT_EQ(::write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
    stray_done = true;
    absl::SleepFor(absl::Milliseconds(200));
    ::close(fd);
  });
  RunRanks(2, [&](int rank) {
    if (rank == 1) {
      while (!stray_done.load()) absl::SleepFor(absl::Milliseconds(1));
    }
    auto p = MustConnect(Options(rank, 2), *store);
    ASSERT_NE(p, nullptr);
    torch::Tensor got = torch::zeros({8});
    auto recv = p->Recv(got, 1 - rank, 0);
    ASSERT_TRUE(p->Send(torch::full({8}, static_cast<float>(rank)), 1 - rank, 0)->Wait().ok());
    ASSERT_TRUE(recv->Wait().ok());
    EXPECT_EQ(got[7].item<float>(), 1.0f - rank);
  });
  stray.join();
}

// Receives posted out of the sender's order: the first receive fails naming what arrived, and
// the pair stays failed (its stream is no longer in step) for both ends, while nothing hangs.
TEST(TcpP2pOrderTest, MismatchedOrderFailsClearlyOnBothEnds) {
  auto store = NewInMemoryStore();
  RunRanks(2, [&](int rank) {
    auto p = MustConnect(Options(rank, 2), *store);
    ASSERT_NE(p, nullptr);
    if (rank == 1) {
      ASSERT_TRUE(p->Send(torch::ones({4}), 0, /*tag=*/1)->Wait().ok());
      ASSERT_TRUE(p->Send(torch::ones({8}), 0, /*tag=*/2)->Wait().ok());
      // Rank 0 broke the stream: what rank 1 sends or receives next fails instead of hanging.
      torch::Tensor got = torch::zeros({4});
      absl::Status s = p->Recv(got, 0, 3)->Wait(absl::Seconds(10));
      EXPECT_TRUE(absl::IsUnavailable(s)) << s;
      return;
    }
    auto second = p->Recv(torch::zeros({8}), 1, 2);
    auto first = p->Recv(torch::zeros({4}), 1, 1);
    absl::Status s = second->Wait(absl::Seconds(10));
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("sent tag 1 with 16 bytes"), std::string::npos) << s;
    EXPECT_TRUE(absl::IsFailedPrecondition(first->Wait(absl::Seconds(10))));
    absl::Status later = p->Recv(torch::zeros({4}), 1, 3)->Wait(absl::Seconds(10));
    EXPECT_NE(later.message().find("failed earlier"), std::string::npos) << later;
  });
}

// A send the socket cannot take at once is finished by the pump as the peer reads; when the peer
// dies instead, the send fails rather than waiting forever.
TEST(TcpP2pSendTest, ASendLargerThanTheSocketCompletesOrFailsWithItsPeer) {
  constexpr int64_t kFloats = 8 << 20;  // 32 MiB: more than loopback buffers hold
  auto store = NewInMemoryStore();
  std::atomic<bool> sent{false};
  RunRanks(2, [&](int rank) {
    auto p = MustConnect(Options(rank, 2), *store);
    ASSERT_NE(p, nullptr);
    if (rank == 0) {
      const torch::Tensor big = torch::arange(kFloats, torch::kFloat32);
      const auto before = Clock::now();
      auto first = p->Send(big, 1, 0);
      EXPECT_FALSE(first->Test());  // not read yet: the rest is the pump's
      EXPECT_LT(Clock::now() - before, std::chrono::seconds(1));
      ASSERT_TRUE(first->Wait(absl::Seconds(20)).ok());  // rank 1 reads it
      sent = true;
      auto second = p->Send(big, 1, 1);  // rank 1 goes away without reading this one
      absl::Status s = second->Wait(absl::Seconds(20));
      EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsCancelled(s)) << s;
      return;
    }
    absl::SleepFor(absl::Milliseconds(100));  // rank 0's send is stuck meanwhile
    torch::Tensor got = torch::zeros({kFloats});
    ASSERT_TRUE(p->Recv(got, 0, 0)->Wait(absl::Seconds(20)).ok());
    EXPECT_TRUE(torch::equal(got, torch::arange(kFloats, torch::kFloat32)));
    while (!sent.load()) absl::SleepFor(absl::Milliseconds(1));
    p.reset();  // dies: its streams close
  });
}

}  // namespace
}  // namespace zpipe::worker::internal
