// A checkpoint directory that cannot take the files, end to end: real zpipe-coordinator and
// zpipe-worker processes, the workers started under a file-size limit (`ulimit -f`, with SIGXFSZ
// ignored, so a write past the limit fails with EFBIG "File too large", much as a full disk fails
// with ENOSPC; no privileges needed). With checkpoint.on_error fail the job fails, its reason
// naming the file and the OS error; with skip it succeeds and its iteration events carry the
// error. Either way no worker dies, no temporary file is left, and the next job runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

namespace fs = std::filesystem;

// 64 KiB: far below a stage file of the GPT below (about 150 KiB with AdamW state), far above
// the markers, manifests and the workers' logs.
constexpr char kFileSizeLimitKib[] = "64";

class LimitedCluster : public testing::LocalCluster {
 public:
  LimitedCluster()
      : LocalCluster(2, {.coordinator_bin = ZPIPE_COORDINATOR_BIN,
                         .worker_bin = ZPIPE_WORKER_BIN,
                         .comm_timeout_s = "5",
                         .worker_wrapper = {"/bin/bash", "-c",
                                            absl::StrCat("trap '' XFSZ; ulimit -f ",
                                                         kFileSizeLimitKib, " && exec \"$@\""),
                                            "limited-worker"}}) {}
};

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("zpipe-ckpt-fail-e2e") {}
};

v1::JobSpec GptSpec(const std::string& name, int iterations) {
  v1::JobSpec spec;
  spec.set_name(name);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_hidden(32);
  gpt->set_heads(2);
  gpt->set_seq_len(16);
  gpt->set_vocab(64);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_schedule()->set_kind("zb-v");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(4);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(3e-3);
  spec.mutable_train()->set_seed(1);
  return spec;
}

v1::JobSpec WithCheckpoint(v1::JobSpec spec, const fs::path& dir, v1::CheckpointOnError on_error) {
  spec.mutable_checkpoint()->set_every(2);
  spec.mutable_checkpoint()->set_dir(dir.string());
  spec.mutable_checkpoint()->set_on_error(on_error);
  return spec;
}

std::vector<std::string> TemporaryFiles(const fs::path& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().find(".tmp.") != std::string::npos) {
      out.push_back(it->path().string());
    }
  }
  return out;
}

void ExpectWorkersAlive(LimitedCluster& cluster) {
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(cluster.worker(i).Running()) << "w" << i << " died:\n"
                                             << cluster.worker(i).ReadErr();
  }
}

// Submits `spec`, follows its events to the end; returns the checkpoint errors the iteration
// summaries carried and the finished job.
struct Outcome {
  v1::Job job;
  std::vector<std::string> checkpoint_errors;
  int iterations = 0;
};

Outcome RunJob(LimitedCluster& cluster, const v1::JobSpec& spec, const std::string& id) {
  Outcome out;
  auto submitted = cluster.client().Submit(spec, id);
  EXPECT_TRUE(submitted.ok()) << submitted.status();
  auto watch = cluster.client().Watch(id);
  while (true) {
    auto event = watch->Next();
    if (!event.ok() || !event->has_value()) break;
    if (!(*event)->has_iteration()) continue;
    ++out.iterations;
    for (const v1::RankIterationStats& r : (*event)->iteration().ranks()) {
      if (!r.checkpoint_error().empty()) out.checkpoint_errors.push_back(r.checkpoint_error());
    }
  }
  auto job = cluster.WaitTerminal(id, 90);
  EXPECT_TRUE(job.ok()) << job.status();
  if (job.ok()) out.job = *job;
  return out;
}

TEST(CheckpointFailureE2eTest, OnErrorFailFailsTheJobNamingTheFileAndTheWorkersCarryOn) {
  LimitedCluster cluster;
  ASSERT_TRUE(cluster.WaitIdle(2));
  TempDir dir;
  const Outcome failed = RunJob(
      cluster, WithCheckpoint(GptSpec("full", 4), dir.path(), v1::CHECKPOINT_ON_ERROR_UNSPECIFIED),
      "full-fail");
  EXPECT_EQ(failed.job.state(), v1::JOB_STATE_FAILED);
  const std::string& reason = failed.job.reason();
  std::printf("reason: %s\n", reason.c_str());
  EXPECT_NE(reason.find((dir.path() / "full" / "iter-2" / "stage-").string()), std::string::npos)
      << reason;
  EXPECT_NE(reason.find(std::strerror(EFBIG)), std::string::npos) << reason;
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
  ExpectWorkersAlive(cluster);

  // The same workers run the next job.
  ASSERT_TRUE(cluster.WaitIdle(2, 30));
  const Outcome next = RunJob(cluster, GptSpec("next", 2), "next");
  EXPECT_EQ(next.job.state(), v1::JOB_STATE_SUCCEEDED) << next.job.reason();
  EXPECT_EQ(next.iterations, 2);
  ExpectWorkersAlive(cluster);
}

TEST(CheckpointFailureE2eTest, OnErrorSkipTrainsToTheEndAndReportsEveryFailedWrite) {
  LimitedCluster cluster;
  ASSERT_TRUE(cluster.WaitIdle(2));
  TempDir dir;
  const Outcome skipped =
      RunJob(cluster, WithCheckpoint(GptSpec("full", 4), dir.path(), v1::CHECKPOINT_ON_ERROR_SKIP),
             "full-skip");
  EXPECT_EQ(skipped.job.state(), v1::JOB_STATE_SUCCEEDED) << skipped.job.reason();
  EXPECT_EQ(skipped.iterations, 4);
  // iter-2 and iter-4 failed on both ranks; each failure is reported once (two may share a
  // report when the first is seen only at the next checkpoint).
  // A rank whose write failed removes the checkpoint's folder (skip leaves no trace), so the other
  // rank, if still writing into it, fails on the vanished folder instead of the size limit.
  std::string all;
  for (const std::string& e : skipped.checkpoint_errors) {
    std::printf("checkpoint error: %s\n", e.c_str());
    EXPECT_TRUE(e.find(std::strerror(EFBIG)) != std::string::npos ||
                e.find(std::strerror(ENOENT)) != std::string::npos)
        << e;
    absl::StrAppend(&all, e, "\n");
  }
  EXPECT_NE(all.find(std::strerror(EFBIG)), std::string::npos) << all;
  EXPECT_FALSE(fs::exists(dir.path() / "full" / "iter-2")) << "a skipped checkpoint leaves no folder";
  auto count = [&](const fs::path& p) {
    int n = 0;
    for (size_t at = all.find(p.string()); at != std::string::npos;
         at = all.find(p.string(), at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count(dir.path() / "full" / "iter-2" / "stage-"), 2) << all;
  EXPECT_EQ(count(dir.path() / "full" / "iter-4" / "stage-"), 2) << all;
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
  EXPECT_FALSE(fs::exists(dir.path() / "full" / "iter-4" / "manifest.json"));
  ExpectWorkersAlive(cluster);

  ASSERT_TRUE(cluster.WaitIdle(2, 30));
  const Outcome next = RunJob(cluster, GptSpec("next", 2), "next");
  EXPECT_EQ(next.job.state(), v1::JOB_STATE_SUCCEEDED) << next.job.reason();
  ExpectWorkersAlive(cluster);
}

}  // namespace
}  // namespace zpipe
