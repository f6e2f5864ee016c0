// Coordinator restarts, timed (issue 30), with a real zpipe-coordinator and real zpipe-worker
// processes on loopback:
// - workers re-register within 1 s of a restarted coordinator starting to listen, however long
//   it was away (so --recovery-grace can be short: docs/operations.md "Failures and recovery");
// - SIGTERM stops a coordinator with connected workers and a running job in under 1 s, and what
//   it acknowledged (a job submitted just before, the running job's progress) is in its store
//   when it comes back.
// ZPIPE_RECONNECT_ROUNDS (default 3) sets how many restarts the first test times; `scripts/bench
// chaos` runs more.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

testing::LocalClusterOptions Options(const std::string& db) {
  testing::LocalClusterOptions o;
  o.coordinator_bin = ZPIPE_COORDINATOR_BIN;
  o.worker_bin = ZPIPE_WORKER_BIN;
  o.db = db;
  // The workers keep their default --reconnect-max-backoff (2 s): the bound must hold with it.
  return o;
}

// True once something accepts TCP connections on `address` ("127.0.0.1:PORT").
bool Listening(const std::string& address) {
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

int AliveWorkers(Client& client) {
  auto workers = client.Workers();
  if (!workers.ok()) return -1;
  int alive = 0;
  for (const auto& w : *workers) {
    alive += w.state() == v1::WORKER_STATE_IDLE || w.state() == v1::WORKER_STATE_BUSY;
  }
  return alive;
}

TEST(ReconnectE2eTest, WorkersRegisterWithinOneSecondOfTheCoordinatorsReturn) {
  int rounds = 3;
  if (const char* env = std::getenv("ZPIPE_RECONNECT_ROUNDS")) (void)absl::SimpleAtoi(env, &rounds);
  testing::LocalCluster cluster(2, Options(":memory:"));
  ASSERT_TRUE(cluster.WaitIdle(2, 60));
  double worst_ms = 0;
  for (int round = 0; round < rounds; ++round) {
    cluster.StopCoordinator(SIGKILL);
    // Away for 0.5 to 4.5 s: past the workers' longest backoff, and at every phase of it.
    const auto gap = std::chrono::milliseconds(500 + (round * 1300) % 4100);
    std::this_thread::sleep_for(gap);
    cluster.StartCoordinator();
    const Clock::time_point start = Clock::now();
    while (!Listening(cluster.address())) {
      ASSERT_LT(MillisSince(start), 10000) << "the coordinator did not start";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const Clock::time_point back = Clock::now();
    while (AliveWorkers(cluster.client()) < 2) {
      ASSERT_LT(MillisSince(back), 10000) << "the workers did not come back";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const double ms = MillisSince(back);
    worst_ms = std::max(worst_ms, ms);
    std::printf("reconnect: round %d, away %lld ms: both workers registered %.0f ms after the "
                "coordinator listened\n",
                round, static_cast<long long>(gap.count()), ms);
    EXPECT_LT(ms, 1000) << "round " << round;
  }
  std::printf("reconnect: worst %.0f ms over %d restarts\n", worst_ms, rounds);
}

v1::JobSpec GptSpec(int iterations) {
  v1::JobSpec spec;
  spec.set_name("sigterm");
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(64);
  gpt->set_heads(2);
  gpt->set_seq_len(32);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind("1f1b");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

TEST(ReconnectE2eTest, SigtermStopsTheCoordinatorWithinOneSecondAndKeepsWhatItAcknowledged) {
  testing::TempDir dir("zpipe-sigterm-e2e");
  testing::LocalCluster cluster(2, Options((dir.path() / "coordinator.db").string()));
  ASSERT_TRUE(cluster.WaitIdle(2, 60));
  ASSERT_TRUE(cluster.client().Submit(GptSpec(100000), "running").ok());
  int before = 0;
  const Clock::time_point start = Clock::now();
  while (before < 3) {
    ASSERT_LT(MillisSince(start), 60000) << "the job did not start";
    auto job = cluster.client().Get("running");
    if (job.ok()) before = job->progress().iterations_done();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Acknowledged just before the signal: a job that waits (both workers are busy).
  ASSERT_TRUE(cluster.client().Submit(GptSpec(10), "queued").ok());

  const Clock::time_point sent = Clock::now();
  cluster.coordinator().Signal(SIGTERM);
  const auto result = cluster.coordinator().Wait(30);
  const double ms = MillisSince(sent);
  std::printf("sigterm: the coordinator exited %.0f ms after SIGTERM (running job at iteration "
              "%d)\n",
              ms, before);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_LT(ms, 1000);

  cluster.StartCoordinator();
  absl::StatusOr<v1::Job> queued, running;
  const Clock::time_point restarted = Clock::now();
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    queued = cluster.client().Get("queued");
    running = cluster.client().Get("running");
  } while ((!queued.ok() || !running.ok()) && MillisSince(restarted) < 10000);
  ASSERT_TRUE(queued.ok()) << queued.status();
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(queued->state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(running->state(), v1::JOB_STATE_RUNNING) << running->reason();
  EXPECT_GE(running->progress().iterations_done(), before);
}

}  // namespace
}  // namespace zpipe
