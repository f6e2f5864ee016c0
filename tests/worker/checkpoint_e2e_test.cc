// Checkpointing end to end: a real coordinator and real worker processes train a small GPT with
// checkpoint.every; the files are there and complete; the same job submitted again for more
// iterations resumes from the latest checkpoint and continues the loss curve of an uninterrupted
// run. A checkpoint of another model shape and an unwritable directory fail the job with a reason
// naming the problem, and the cluster runs the next job.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

namespace fs = std::filesystem;

class Cluster : public testing::LocalCluster {
 public:
  explicit Cluster(int workers)
      : LocalCluster(workers, {.coordinator_bin = ZPIPE_COORDINATOR_BIN,
                               .worker_bin = ZPIPE_WORKER_BIN,
                               .comm_timeout_s = "5"}) {}
};

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("zpipe-ckpt-e2e") {}
};

v1::JobSpec GptSpec(const std::string& name, int iterations, int hidden = 32) {
  v1::JobSpec spec;
  spec.set_name(name);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(hidden);
  gpt->set_heads(2);
  gpt->set_seq_len(16);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind("zb-v");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

v1::JobSpec WithCheckpoint(v1::JobSpec spec, int every, const fs::path& dir) {
  spec.mutable_checkpoint()->set_every(every);
  spec.mutable_checkpoint()->set_dir(dir.string());
  return spec;
}

// Submits, follows the watch stream to the end; loss by iteration number.
std::map<int, double> RunToSuccess(Cluster& cluster, const v1::JobSpec& spec,
                                   const std::string& id) {
  std::map<int, double> losses;
  auto submitted = cluster.client().Submit(spec, id);
  EXPECT_TRUE(submitted.ok()) << submitted.status();
  if (!submitted.ok()) return losses;
  auto watch = cluster.client().Watch(id);
  while (true) {
    auto event = watch->Next();
    if (!event.ok() || !event->has_value()) break;
    if ((*event)->has_iteration() && (*event)->iteration().has_loss()) {
      losses[(*event)->iteration().iteration()] = (*event)->iteration().loss();
    }
  }
  auto job = cluster.WaitTerminal(id, 60);
  EXPECT_TRUE(job.ok()) << job.status();
  if (job.ok()) {
    EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << id << ": " << job->reason();
  }
  return losses;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CheckpointE2eTest, SavesCompleteCheckpointsAndTheResubmittedJobResumesWhereItLeftOff) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.WaitIdle(2));
  TempDir dir;

  // 6 iterations, a checkpoint every 4: iter-4, and iter-6 at the end.
  const std::map<int, double> first =
      RunToSuccess(cluster, WithCheckpoint(GptSpec("gpt-ckpt", 6), 4, dir.path()), "first");
  ASSERT_EQ(first.size(), 6u);
  const fs::path root = dir.path() / "gpt-ckpt";
  for (int k : {4, 6}) {
    const fs::path it = root / absl::StrCat("iter-", k);
    for (const char* f : {"manifest.json", "rank-0.done", "rank-1.done", "stage-0.pt", "stage-1.pt",
                          "stage-2.pt", "stage-3.pt"}) {
      EXPECT_TRUE(fs::exists(it / f)) << it / f;
    }
  }
  EXPECT_FALSE(fs::exists(root / "iter-5"));
  const std::string manifest = Slurp(root / "iter-6" / "manifest.json");
  EXPECT_NE(manifest.find("\"iteration\": 6"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"job_id\": \"first\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"schedule\": \"zb-v\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"stages\": 4"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find(absl::StrCat("\"loss\": ")), std::string::npos) << manifest;

  // What 10 uninterrupted iterations give (another name, no checkpoint).
  const std::map<int, double> reference = RunToSuccess(cluster, GptSpec("gpt-ref", 10), "ref");
  ASSERT_EQ(reference.size(), 10u);
  for (int it = 0; it < 6; ++it) EXPECT_NEAR(first.at(it), reference.at(it), 1e-6) << it;

  // The same job for 10 iterations: starts at iteration 6 and continues the reference curve.
  const std::map<int, double> second =
      RunToSuccess(cluster, WithCheckpoint(GptSpec("gpt-ckpt", 10), 4, dir.path()), "second");
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.begin()->first, 6) << "resumed at iteration 6";
  EXPECT_EQ(second.size(), 4u);
  for (const auto& [it, loss] : second) {
    EXPECT_NEAR(loss, reference.at(it), 1e-5) << "iteration " << it;
  }
  EXPECT_LT(second.at(6), first.at(0) - 0.3) << "not restarted from the initial loss";
  EXPECT_TRUE(fs::exists(root / "iter-8" / "manifest.json"));
  EXPECT_TRUE(fs::exists(root / "iter-10" / "manifest.json"));

  // Once more: iter-10 leaves nothing to run; the job succeeds without an iteration.
  const std::map<int, double> third =
      RunToSuccess(cluster, WithCheckpoint(GptSpec("gpt-ckpt", 10), 4, dir.path()), "third");
  EXPECT_TRUE(third.empty());
}

TEST(CheckpointE2eTest, MismatchedCheckpointAndUnwritableDirFailTheJobNotTheCluster) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.WaitIdle(2));
  TempDir dir;
  RunToSuccess(cluster, WithCheckpoint(GptSpec("shape", 2), 2, dir.path()), "small");
  ASSERT_TRUE(fs::exists(dir.path() / "shape" / "iter-2" / "manifest.json"));

  // Same name, wider model: fails naming the field and both values.
  ASSERT_TRUE(cluster.client()
                  .Submit(WithCheckpoint(GptSpec("shape", 4, /*hidden=*/64), 2, dir.path()), "wide")
                  .ok());
  auto wide = cluster.WaitTerminal("wide", 60);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->state(), v1::JOB_STATE_FAILED);
  std::printf("mismatch: %s\n", wide->reason().c_str());
  EXPECT_NE(wide->reason().find("model.gpt.hidden is 32 in the checkpoint, 64 in this job"),
            std::string::npos)
      << wide->reason();

  // A directory nobody can create (below a regular file, so even root cannot).
  std::ofstream(dir.path() / "a-file") << "x";
  const fs::path bad = dir.path() / "a-file" / "ckpts";
  ASSERT_TRUE(
      cluster.client().Submit(WithCheckpoint(GptSpec("shape", 2), 1, bad), "unwritable").ok());
  auto unwritable = cluster.WaitTerminal("unwritable", 60);
  ASSERT_TRUE(unwritable.ok()) << unwritable.status();
  EXPECT_EQ(unwritable->state(), v1::JOB_STATE_FAILED);
  std::printf("unwritable: %s\n", unwritable->reason().c_str());
  EXPECT_NE(unwritable->reason().find((bad / "shape").string()), std::string::npos)
      << unwritable->reason();

  // Coordinator and workers carry on.
  ASSERT_TRUE(cluster.WaitIdle(2, 30));
  const std::map<int, double> after = RunToSuccess(cluster, GptSpec("after", 2), "after");
  EXPECT_EQ(after.size(), 2u);
}

}  // namespace
}  // namespace zpipe
