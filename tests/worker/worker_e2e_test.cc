// zpipe-worker end to end: a real coordinator and real worker processes train over loopback on
// the TCP streams (GPT layers split evenly or not over the stages); a worker killed mid-job fails
// the job with a reason naming it, and the survivors go back to idle and run the next job.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/cli/subprocess.h"
#include "tests/support/local_cluster.h"

namespace zpipe {
namespace {

using testing::Subprocess;

testing::LocalClusterOptions ClusterOptions() {
  testing::LocalClusterOptions o;
  o.coordinator_bin = ZPIPE_COORDINATOR_BIN;
  o.worker_bin = ZPIPE_WORKER_BIN;
  o.comm_timeout_s = "4";
  return o;
}

class Cluster : public testing::LocalCluster {
 public:
  explicit Cluster(int workers) : LocalCluster(workers, ClusterOptions()) {}
};

v1::JobSpec GptSpec(const std::string& schedule, int p, int m, int iterations) {
  v1::JobSpec spec;
  spec.set_name("gpt-e2e");
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(2 * p);
  gpt->set_hidden(32);
  gpt->set_heads(2);
  gpt->set_seq_len(16);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind(schedule);
  spec.mutable_batch()->set_microbatches(m);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

// Losses of every iteration, in order, from the job's watch stream.
std::vector<double> WatchLosses(Client& client, const std::string& id) {
  std::vector<double> losses;
  auto watch = client.Watch(id);
  while (true) {
    auto event = watch->Next();
    if (!event.ok() || !event->has_value()) break;
    if ((*event)->has_iteration() && (*event)->iteration().has_loss()) {
      losses.push_back((*event)->iteration().loss());
    }
  }
  return losses;
}

// `layers`: 0 = 2 per pipeline rank.
void TrainsWithFallingLoss(const std::string& schedule, int p, int m, int layers = 0) {
  Cluster cluster(p);
  ASSERT_TRUE(cluster.WaitIdle(p));
  const std::string id = absl::StrCat("gpt-", schedule, "-p", p);
  v1::JobSpec spec = GptSpec(schedule, p, m, 30);
  if (layers > 0) spec.mutable_model()->mutable_gpt()->set_layers(layers);
  auto submitted = cluster.client().Submit(spec, id);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  std::vector<double> losses = WatchLosses(cluster.client(), id);
  auto job = cluster.WaitTerminal(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_LT(losses.back(), losses.front() - 0.5)
      << "loss " << losses.front() << " -> " << losses.back();
  EXPECT_EQ(job->progress().iterations_done(), 30);
}

TEST(WorkerE2eTest, GptZbVPipeline2Trains) { TrainsWithFallingLoss("zb-v", 2, 4); }

TEST(WorkerE2eTest, GptOneF1BPipeline4Trains) { TrainsWithFallingLoss("1f1b", 4, 8); }

// The layers need not split evenly: 5 layers on ZB-V's 4 stages hold 2, 1, 1, 1.
TEST(WorkerE2eTest, GptUnevenSplitTrains) { TrainsWithFallingLoss("zb-v", 2, 4, /*layers=*/5); }

// A CPU job runs on ZeroPipe's TCP streams, and every rank says so in its log.
TEST(WorkerE2eTest, CpuJobsRunOnTheTcpStreamsAndSaySo) {
  testing::LocalCluster cluster(3, ClusterOptions());
  ASSERT_TRUE(cluster.WaitIdle(3));
  const std::string id = "gpt-transport-tcp";
  auto submitted = cluster.client().Submit(GptSpec("zb-v", 3, 6, 5), id);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::vector<double> losses = WatchLosses(cluster.client(), id);
  auto job = cluster.WaitTerminal(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  ASSERT_EQ(losses.size(), 5u);
  int ranks_saying = 0;
  LogsOptions follow;
  follow.follow = true;
  ASSERT_TRUE(cluster.client()
                  .Logs(id, follow,
                        [&](const v1::LogLine& line) {
                          ranks_saying +=
                              line.text().find("cpu, TCP streams data path") != std::string::npos;
                          return true;
                        })
                  .ok());
  EXPECT_EQ(ranks_saying, 3);
}

// The Gloo path went with Debian's LibTorch: a worker asked for it refuses to start, saying why
// and what to do, whether by flag or by environment.
TEST(WorkerE2eTest, TheGlooTransportIsRefusedSayingWhy) {
  for (const auto& [argv, env] :
       {std::pair<std::vector<std::string>, std::map<std::string, std::string>>{
            {ZPIPE_WORKER_BIN, "--transport", "gloo"}, {}},
        {{ZPIPE_WORKER_BIN}, {{"ZPIPE_TRANSPORT", "gloo"}}}}) {
    testing::ProcessResult r = testing::RunProcess(argv, env);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--transport gloo"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("PyTorch wheel"), std::string::npos) << r.err;
  }
}

TEST(WorkerE2eTest, DataParallelGptTrainsWithOverlappedReduction) {
  Cluster cluster(4);
  ASSERT_TRUE(cluster.WaitIdle(4));
  v1::JobSpec spec = GptSpec("zb-v", 2, 4, 10);
  spec.mutable_parallel()->set_data(2);
  spec.mutable_grad_sync()->set_bucket_mb(0.01);  // several buckets per stage
  ASSERT_TRUE(cluster.client().Submit(spec, "dp2").ok());
  std::vector<double> losses = WatchLosses(cluster.client(), "dp2");
  auto job = cluster.WaitTerminal("dp2");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  ASSERT_EQ(losses.size(), 10u);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_GT(job->latest_summary().reduce_total_s(), 0);
}

TEST(WorkerE2eTest, TerminatedWorkerTellsTheCoordinatorItIsLeaving) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.WaitIdle(2));
  v1::JobSpec spec = GptSpec("zb-h1", 2, 4, 100000);
  spec.set_name("left-behind");
  ASSERT_TRUE(cluster.client().Submit(spec, "left").ok());
  for (int i = 0; i < 400; ++i) {
    auto job = cluster.client().Get("left");
    ASSERT_TRUE(job.ok());
    if (job->progress().iterations_done() >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto t0 = std::chrono::steady_clock::now();
  cluster.worker(1).Signal(SIGTERM);
  auto job = cluster.WaitTerminal("left", 60);
  ASSERT_TRUE(job.ok()) << job.status();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  std::printf("failed %.2f s after SIGTERM: %s\n", took, job->reason().c_str());
  EXPECT_EQ(job->reason().rfind("worker w1 (pipeline rank 1, data rank 0) lost: left: signal 15 "
                                "(SIGTERM)",
                                0),
            0u)
      << job->reason();
  EXPECT_LT(took, 3.0);  // the heartbeat timeout here: not waited for
}

TEST(WorkerE2eTest, KilledWorkerFailsJobAndOthersGoBackToIdle) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.WaitIdle(2));
  v1::JobSpec spec;
  spec.set_name("long-synthetic");
  auto* syn = spec.mutable_model()->mutable_synthetic();
  syn->set_forward_ms(5);
  syn->set_backward_ms(5);
  syn->set_weight_ms(3);
  syn->set_activation_kb(16);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_schedule()->set_kind("zb-h1");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(100000);
  spec.mutable_train()->set_lr(1e-3);
  ASSERT_TRUE(cluster.client().Submit(spec, "doomed").ok());
  // Let it run a few iterations, then kill rank 1's worker outright.
  for (int i = 0; i < 200; ++i) {
    auto job = cluster.client().Get("doomed");
    ASSERT_TRUE(job.ok());
    if (job->progress().iterations_done() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  cluster.worker(1).Signal(SIGKILL);
  auto job = cluster.WaitTerminal("doomed", 60);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  std::printf("failure reason: %s\n", job->reason().c_str());
  // The cause is the rank that died, even when the survivor's broken connection is reported
  // first: the reason starts with w1, not w0.
  EXPECT_EQ(job->reason().rfind("worker w1 (pipeline rank 1, data rank 0) lost", 0), 0u)
      << job->reason();
  // The survivor returns to idle and, with a replacement, runs the next job to the end.
  cluster.AddWorker();
  ASSERT_TRUE(cluster.WaitIdle(2, 60));
  ASSERT_TRUE(cluster.client().Submit(GptSpec("zb-h1", 2, 4, 3), "after").ok());
  auto after = cluster.WaitTerminal("after");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state(), v1::JOB_STATE_SUCCEEDED) << after->reason();
}

TEST(WorkerE2eTest, SigtermStopsTheDaemonCleanly) {
  Cluster cluster(1);
  ASSERT_TRUE(cluster.WaitIdle(1));
  cluster.worker(0).Signal(SIGTERM);
  testing::ProcessResult r = cluster.worker(0).Wait(10);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stopped"), std::string::npos) << r.err;
}

// --data-root: a job whose checkpoint.dir lies outside the worker's roots fails before it touches
// anything, with a reason naming the path and the flag; the workers stay up and run the next job,
// which checkpoints under a root.
TEST(WorkerE2eTest, AJobNamingAPathOutsideTheDataRootsFailsAndTheWorkersRunTheNext) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / absl::StrCat("zpipe_data_roots_e2e_", getpid());
  fs::remove_all(base);
  fs::create_directories(base / "allowed");
  fs::create_directories(base / "outside");
  testing::LocalClusterOptions options = ClusterOptions();
  options.data_roots = {(base / "allowed").string()};
  testing::LocalCluster cluster(2, options);
  ASSERT_TRUE(cluster.WaitIdle(2));
  v1::JobSpec spec = GptSpec("1f1b", 2, 2, 2);
  spec.mutable_checkpoint()->set_every(1);
  // Through ".." from inside the root, so resolving matters.
  spec.mutable_checkpoint()->set_dir((base / "allowed" / ".." / "outside").string());
  ASSERT_TRUE(cluster.client().Submit(spec, "escape").ok());
  auto failed = cluster.WaitTerminal("escape");
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(failed->reason().find("checkpoint.dir '" + spec.checkpoint().dir() + "'"),
            std::string::npos)
      << failed->reason();
  EXPECT_NE(failed->reason().find("--data-root"), std::string::npos) << failed->reason();
  EXPECT_TRUE(fs::is_empty(base / "outside"));

  ASSERT_TRUE(cluster.WaitIdle(2, 60));
  spec.mutable_checkpoint()->set_dir((base / "allowed").string());
  ASSERT_TRUE(cluster.client().Submit(spec, "inside").ok());
  auto done = cluster.WaitTerminal("inside");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->reason();
  EXPECT_TRUE(fs::exists(base / "allowed" / "gpt-e2e" / "iter-2" / "manifest.json"));
  fs::remove_all(base);
}

}  // namespace
}  // namespace zpipe
