// Job checkpoints: the layout on disk, what counts as complete, which checkpoint a job resumes,
// the mismatch message, and the early error for an unusable directory; background writes (the
// same bytes as a synchronous save), failed writes under a file-size limit (a status naming the
// file, no temporary file left, checkpoint.on_error fail and skip) and checkpoint.keep pruning.
// One rank, one stage: the multi-rank save/load of the stage files is
// worker/executor/checkpoint_test.cc.
#include "worker/daemon/job_checkpoint.h"
#include "worker/daemon/permanent_error.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/executor/checkpoint.h"
#include "worker/executor/testing/temp_dir.h"
#include "worker/model/gpt.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("zpipe-jobckpt-test") {}
};

core::Plan OneRankPlan() {
  core::ScheduleRequest req;
  req.pipeline = 1;
  req.microbatches = 1;
  req.cost = core::CostModel::Uniform(1, core::StageCost{});
  auto plan = core::GenerateSchedule(core::ScheduleKind::k1F1B, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// A GPT job of one rank checkpointing every `every` iterations (none at 0) under `dir`.
JobConfig OneRankJob(const fs::path& dir, int every, int iterations, int hidden = 16) {
  JobConfig job;
  job.job_id = "job-1";
  job.rendezvous_prefix = "job-1/a1/";
  job.plan = OneRankPlan();
  JobSettings& s = job.settings;
  s.name = "ckpt-job";
  s.schedule = "1f1b";
  const model::GptConfig gpt{.layers = 4, .hidden = hidden, .heads = 2, .seq_len = 8, .vocab = 32};
  s.model = GptSource{gpt};
  // As job_proto.cc renders the model spec.
  s.model_json = absl::StrCat(R"({"gpt":{"layers":4,"hidden":)", hidden,
                              R"(,"heads":2,"seq_len":8,"vocab":32}})");
  s.train.iterations = iterations;
  s.train.optimizer = Optimizer::kAdamW;
  if (every > 0) {
    s.checkpoint =
        CheckpointConfig{.dir = dir.string(), .every = every, .keep = 0, .skip_errors = false};
  }
  return job;
}

// A one-stage executor for `a`'s model.
struct OneRank {
  std::unique_ptr<KeyValueStore> store = NewInMemoryStore();
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Executor> exec;
  std::optional<model::SyntheticTokenData> data;
};

std::unique_ptr<OneRank> MakeOneRank(const JobConfig& job, uint64_t seed) {
  auto out = std::make_unique<OneRank>();
  CommunicatorOptions opts;
  opts.pipeline_size = 1;
  auto comm = NewTcpCommunicator(opts, *out->store);
  EXPECT_TRUE(comm.ok()) << comm.status();
  out->comm = *std::move(comm);
  const model::GptConfig& config = std::get<GptSource>(job.settings.model).config;
  model::StageOptions so;
  so.seed = seed;
  auto stage = model::MakeGptStage(config, so);
  EXPECT_TRUE(stage.ok()) << stage.status();
  std::vector<std::unique_ptr<model::Stage>> stages;
  stages.push_back(*std::move(stage));
  auto data = model::SyntheticTokenData::Make(1, config.vocab, config.seq_len, 2);
  EXPECT_TRUE(data.ok());
  out->data.emplace(*std::move(data));
  ExecutorConfig ec;
  ec.microbatch_size = 2;
  auto exec = Executor::Make(OneRankPlan(), 0, 0, ec, std::move(stages), *out->comm, &*out->data,
                             nullptr, nullptr);
  EXPECT_TRUE(exec.ok()) << exec.status();
  out->exec = *std::move(exec);
  return out;
}

// Runs iterations [from, to) with checkpointing; returns the losses.
std::vector<double> Train(OneRank& rank, JobCheckpointer& ckpt, int from, int to) {
  std::vector<double> losses;
  for (int it = from; it < to; ++it) {
    auto s = rank.exec->RunIteration(it);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) break;
    losses.push_back(s->loss.value_or(-1));
    auto st = ckpt.AfterIteration(*rank.exec, it + 1, s->loss);
    EXPECT_TRUE(st.ok()) << st.status();
  }
  auto end = ckpt.Finish();
  EXPECT_TRUE(end.ok()) << end.status();
  return losses;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every file under `root` whose name holds ".tmp." (a write's temporary file).
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

// While alive, this process may not write files larger than `bytes`: a write past it fails with
// EFBIG ("File too large") instead of raising SIGXFSZ, as with `ulimit -f` and SIGXFSZ ignored.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = SIG_DFL;
};

TEST(JobCheckpointTest, SavesEveryNAndAtTheEndAndResumesFromTheLatest) {
  TempDir dir;
  const JobConfig a = OneRankJob(dir.path(), 2, 5);
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_NE(*ckpt, nullptr);
  auto rank = MakeOneRank(a, 1);
  auto start = (*ckpt)->Resume(*rank->exec, *rank->store, absl::Seconds(5));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(*start, 0);
  const std::vector<double> losses = Train(*rank, **ckpt, 0, 5);
  auto uninterrupted = rank->exec->RunIteration(5);  // what iteration 5 gives without a stop
  ASSERT_TRUE(uninterrupted.ok() && uninterrupted->loss) << uninterrupted.status();

  const fs::path root = dir.path() / "ckpt-job";
  for (int k : {2, 4, 5}) {
    for (const char* f : {"stage-0.pt", "rank-0.done", "manifest.json"}) {
      EXPECT_TRUE(fs::exists(root / absl::StrCat("iter-", k) / f)) << k << " " << f;
    }
  }
  for (int k : {1, 3}) EXPECT_FALSE(fs::exists(root / absl::StrCat("iter-", k))) << k;
  std::ifstream in(root / "iter-4" / "manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto manifest = CheckpointManifest::FromJson(text);
  ASSERT_TRUE(manifest.ok()) << manifest.status() << text;
  EXPECT_EQ(manifest->job_name, "ckpt-job");
  EXPECT_EQ(manifest->job_id, "job-1");
  EXPECT_EQ(manifest->schedule, "1f1b");
  EXPECT_EQ(manifest->pipeline, 1);
  EXPECT_EQ(manifest->data, 1);
  EXPECT_EQ(manifest->stages, 1);
  EXPECT_EQ(manifest->iteration, 4);
  ASSERT_TRUE(manifest->loss.has_value());
  EXPECT_DOUBLE_EQ(*manifest->loss, losses[3]);
  EXPECT_NE(text.find("\"hidden\": 16"), std::string::npos) << text;

  // The same job, longer: a fresh rank (another init seed) resumes at 5 and goes on as if never
  // stopped; a run from the iter-4 checkpoint reproduces iteration 4's loss exactly.
  JobConfig longer = OneRankJob(dir.path(), 2, 7);
  auto ckpt2 = JobCheckpointer::Make(longer);
  ASSERT_TRUE(ckpt2.ok()) << ckpt2.status();
  auto fresh = MakeOneRank(longer, 99);
  auto resumed = (*ckpt2)->Resume(*fresh->exec, *fresh->store, absl::Seconds(5));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(*resumed, 5);
  const std::vector<double> more = Train(*fresh, **ckpt2, 5, 7);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0], *uninterrupted->loss) << "continues exactly where the first run stopped";

  // iter-5 and iter-7 lose their marker (a crash mid-save): the latest complete one is iter-6.
  fs::remove(root / "iter-7" / "rank-0.done");
  fs::remove(root / "iter-5" / "manifest.json");
  auto point = FindResumePoint(root, CheckpointManifest::ForJob(longer), 7);
  ASSERT_TRUE(point.ok()) << point.status();
  ASSERT_TRUE(point->has_value());
  EXPECT_EQ((*point)->manifest.iteration, 6);
  EXPECT_EQ((*point)->dir, root / "iter-6");
  // A job of 4 iterations resumes at 4 at the latest.
  point = FindResumePoint(root, CheckpointManifest::ForJob(a), 4);
  ASSERT_TRUE(point.ok() && point->has_value());
  EXPECT_EQ((*point)->manifest.iteration, 4);
}

TEST(JobCheckpointTest, OtherRanksFollowGlobalRankZerosDecision) {
  TempDir dir;
  JobConfig a = OneRankJob(dir.path(), 1, 2);
  auto rank = MakeOneRank(a, 1);
  auto writer = JobCheckpointer::Make(a);
  ASSERT_TRUE(writer.ok()) << writer.status();
  Train(*rank, **writer, 0, 2);
  // A replica (data rank 1) of a job with d = 2: it writes nothing and waits for the decision.
  JobConfig replica = OneRankJob(dir.path(), 1, 3);
  replica.rank.data_size = 2;
  replica.rank.data_rank = 1;
  replica.rank.global_rank = 1;
  auto follower = JobCheckpointer::Make(replica);
  ASSERT_TRUE(follower.ok()) << follower.status();
  auto other = MakeOneRank(replica, 5);
  absl::StatusOr<int> waited =
      (*follower)->Resume(*other->exec, *other->store, absl::Milliseconds(100));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded) << waited.status();
  ASSERT_TRUE(other->store->Set("job-1/a1/checkpoint/resume", "resume 2").ok());
  auto k = (*follower)->Resume(*other->exec, *other->store, absl::Seconds(1));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, 2);
  ASSERT_TRUE(other->store->Set("job-1/a1/checkpoint/resume", "error it differs").ok());
  k = (*follower)->Resume(*other->exec, *other->store, absl::Seconds(1));
  EXPECT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(k.status().message(), "it differs");
  // The replica wrote nothing.
  Train(*other, **follower, 2, 3);
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt-job" / "iter-3"));
}

TEST(JobCheckpointTest, AMismatchedCheckpointFailsNamingWhatDiffers) {
  TempDir dir;
  const JobConfig a = OneRankJob(dir.path(), 1, 1, /*hidden=*/16);
  auto rank = MakeOneRank(a, 1);
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  Train(*rank, **ckpt, 0, 1);

  JobConfig wide = OneRankJob(dir.path(), 1, 3, /*hidden=*/32);
  wide.settings.train.optimizer = Optimizer::kSgd;
  auto ckpt2 = JobCheckpointer::Make(wide);
  ASSERT_TRUE(ckpt2.ok()) << ckpt2.status();
  auto other = MakeOneRank(wide, 1);
  auto k = (*ckpt2)->Resume(*other->exec, *other->store, absl::Seconds(1));
  ASSERT_EQ(k.status().code(), absl::StatusCode::kFailedPrecondition) << k.status();
  const std::string msg(k.status().message());
  EXPECT_NE(msg.find((dir.path() / "ckpt-job" / "iter-1").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.gpt.hidden is 16 in the checkpoint, 32 in this job"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.optimizer is \"adamw\" in the checkpoint, \"sgd\" in this job"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("layers"), std::string::npos) << "only what differs: " << msg;
  // The decision reached the store for the other ranks.
  auto decision = other->store->Get("job-1/a1/checkpoint/resume");
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->rfind("error ", 0), 0u) << *decision;
}

TEST(JobCheckpointTest, AnUnusableDirectoryFailsAtTheStartNamingThePath) {
  TempDir dir;
  std::ofstream(dir.path() / "a-file") << "x";
  const fs::path bad = dir.path() / "a-file" / "ckpts";
  auto ckpt = JobCheckpointer::Make(OneRankJob(bad, 1, 1));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ckpt.status().message().find((bad / "ckpt-job").string()), std::string::npos)
      << ckpt.status();
  EXPECT_NE(ckpt.status().message().find("spec.checkpoint.dir"), std::string::npos)
      << ckpt.status();
}

TEST(JobCheckpointTest, OffWithoutEveryAndNamesThatCannotBeDirectories) {
  TempDir dir;
  auto off = JobCheckpointer::Make(OneRankJob(dir.path(), 0, 1));
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);
  JobConfig dots = OneRankJob(dir.path(), 1, 1);
  dots.settings.name = "..";
  auto bad = JobCheckpointer::Make(dots);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

TEST(JobCheckpointTest, ManifestRoundTripsAndMismatchIsEmptyForTheSameModel) {
  JobConfig a = OneRankJob("/x", 1, 1);
  CheckpointManifest m = CheckpointManifest::ForJob(a);
  m.iteration = 3;
  m.loss = 2.5;
  auto back = CheckpointManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->iteration, 3);
  EXPECT_EQ(back->loss, 2.5);
  EXPECT_EQ(DescribeMismatch(*back, m), "");
  // Schedule, p, d, lr and iterations may change between runs.
  a.settings.schedule = "zb-h1";
  a.settings.train.lr = 1;
  a.rank.data_size = 4;
  EXPECT_EQ(DescribeMismatch(*back, CheckpointManifest::ForJob(a)), "");
  EXPECT_FALSE(CheckpointManifest::FromJson("{}").ok());
  EXPECT_FALSE(CheckpointManifest::FromJson("not json").ok());
}

// A Python model's checkpoint resumes whatever model.python.compile the two runs use (the
// parameters are the module's either way), including one written before the field existed; a
// different factory still differs.
TEST(JobCheckpointTest, APythonModelResumesAcrossCompileModes) {
  CheckpointManifest saved, job;
  saved.model_json = R"({"python":{"file":"m.py","factory":"build","args":"","cuts":[]}})";
  job.model_json =
      R"({"python":{"file":"m.py","factory":"build","args":"","cuts":[],"compile":"trace"}})";
  EXPECT_EQ(DescribeMismatch(saved, job), "");
  job.model_json =
      R"({"python":{"file":"m.py","factory":"make","args":"","cuts":[],"compile":"none"}})";
  EXPECT_EQ(DescribeMismatch(saved, job),
            R"(model.python.factory is "build" in the checkpoint, "make" in this job)");
}

TEST(JobCheckpointTest, ABackgroundWriteHoldsTheSameBytesAsASynchronousSave) {
  TempDir dir, sync_dir;
  const JobConfig a = OneRankJob(dir.path(), 1, 3);
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto rank = MakeOneRank(a, 1);
  ASSERT_TRUE(rank->exec->RunIteration(0).ok());
  auto step = (*ckpt)->AfterIteration(*rank->exec, 1, std::nullopt);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->started);
  EXPECT_GE(step->stall, step->snapshot + step->waited);
  // The same state, saved in this thread; then training changes the parameters and optimizer
  // state while the background write may still run: it wrote its own copy.
  ASSERT_TRUE(SaveStageCheckpoints(*rank->exec, sync_dir.path()).ok());
  ASSERT_TRUE(rank->exec->RunIteration(1).ok());
  auto end = (*ckpt)->Finish();
  ASSERT_TRUE(end.ok()) << end.status();
  const std::string background = Slurp(dir.path() / "ckpt-job" / "iter-1" / "stage-0.pt");
  const std::string foreground = Slurp(sync_dir.path() / "stage-0.pt");
  ASSERT_FALSE(background.empty());
  EXPECT_TRUE(background == foreground) << "background " << background.size() << " bytes, sync "
                                        << foreground.size() << " bytes, contents differ";
  // And the synchronous mode of the checkpointer writes those bytes too.
  TempDir dir2;
  auto sync_ckpt = JobCheckpointer::Make(OneRankJob(dir2.path(), 1, 3), {.background = false});
  ASSERT_TRUE(sync_ckpt.ok()) << sync_ckpt.status();
  auto again = MakeOneRank(a, 1);
  ASSERT_TRUE(again->exec->RunIteration(0).ok());
  ASSERT_TRUE((*sync_ckpt)->AfterIteration(*again->exec, 1, std::nullopt).ok());
  EXPECT_TRUE(Slurp(dir2.path() / "ckpt-job" / "iter-1" / "stage-0.pt") == foreground);
}

TEST(JobCheckpointTest, AFailedWriteFailsNamingTheFileAndTheOsErrorAndLeavesNoTemporaryFile) {
  TempDir dir;
  const JobConfig a = OneRankJob(dir.path(), 2, 5);
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto rank = MakeOneRank(a, 1);
  const fs::path root = dir.path() / "ckpt-job";
  auto expect_names_file = [](const absl::Status& st, const fs::path& file) {
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_NE(st.message().find(file.string()), std::string::npos) << st;
    EXPECT_NE(st.message().find(std::strerror(EFBIG)), std::string::npos) << st;
  };
  ASSERT_TRUE(rank->exec->RunIteration(0).ok());
  ASSERT_TRUE(rank->exec->RunIteration(1).ok());
  {
    // The stage file is larger than this; the marker and manifest are not.
    FileSizeLimit limit(4096);
    auto step = (*ckpt)->AfterIteration(*rank->exec, 2, std::nullopt);
    ASSERT_TRUE(step.ok()) << "the write runs in the background: " << step.status();
    // Training goes on; the failure comes back at a later iteration boundary, unasked.
    absl::Status seen;
    for (int i = 0; i < 500 && seen.ok(); ++i) {
      ASSERT_TRUE(rank->exec->RunIteration(2).ok());
      seen = (*ckpt)->AfterIteration(*rank->exec, 3, std::nullopt).status();
    }
    expect_names_file(seen, root / "iter-2" / "stage-0.pt");
    // Issue 30: a full disk is not worth a restart; the rank's failure says so.
    EXPECT_TRUE(IsPermanent(seen)) << seen;
  }
  EXPECT_TRUE((*ckpt)->Finish().ok()) << "the error was delivered once";
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
  EXPECT_FALSE(fs::exists(root / "iter-2" / "stage-0.pt")) << "its space is given back";
  {
    // At the end: Finish waits for the last write and returns its error.
    FileSizeLimit limit(4096);
    ASSERT_TRUE((*ckpt)->AfterIteration(*rank->exec, 4, std::nullopt).ok());
    expect_names_file((*ckpt)->Finish().status(), root / "iter-4" / "stage-0.pt");
  }
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
  // Without the limit the same checkpointer writes again.
  ASSERT_TRUE((*ckpt)->AfterIteration(*rank->exec, 5, std::nullopt).ok());
  ASSERT_TRUE((*ckpt)->Finish().ok());
  EXPECT_TRUE(fs::exists(root / "iter-5" / "manifest.json"));
}

TEST(JobCheckpointTest, OnErrorSkipReportsTheFailureAndTheNextCheckpointIsComplete) {
  TempDir dir;
  JobConfig a = OneRankJob(dir.path(), 2, 6);
  a.settings.checkpoint->skip_errors = true;
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto rank = MakeOneRank(a, 1);
  std::string skipped;
  for (int it = 0; it < 6; ++it) {
    ASSERT_TRUE(rank->exec->RunIteration(it).ok());
    std::optional<FileSizeLimit> limit;
    if (it + 1 == 2) limit.emplace(4096);
    auto step = (*ckpt)->AfterIteration(*rank->exec, it + 1, std::nullopt);
    ASSERT_TRUE(step.ok()) << step.status();
    if (it + 1 == 2) {
      // Hold the limit until this write is over.
      auto end = (*ckpt)->Finish();
      ASSERT_TRUE(end.ok()) << end.status();
      skipped += end->skipped;
    }
    skipped += step->skipped;
  }
  auto end = (*ckpt)->Finish();
  ASSERT_TRUE(end.ok()) << end.status();
  const fs::path root = dir.path() / "ckpt-job";
  EXPECT_NE(skipped.find((root / "iter-2" / "stage-0.pt").string()), std::string::npos) << skipped;
  EXPECT_NE(skipped.find(std::strerror(EFBIG)), std::string::npos) << skipped;
  EXPECT_FALSE(fs::exists(root / "iter-2" / "rank-0.done"));
  // Issue 30: no trace of the skipped checkpoint, not even an empty folder.
  EXPECT_FALSE(fs::exists(root / "iter-2")) << "a skipped checkpoint left its folder";
  for (int k : {4, 6}) EXPECT_TRUE(fs::exists(root / absl::StrCat("iter-", k) / "manifest.json"));
  EXPECT_TRUE(TemporaryFiles(dir.path()).empty());
  auto point = LatestCompleteCheckpoint(root);
  ASSERT_TRUE(point.ok() && point->has_value());
  EXPECT_EQ((*point)->manifest.iteration, 6);
}

// A checkpoint directory as a rank would leave it: complete (manifest and marker) or not.
void FakeCheckpoint(const fs::path& root, int k, bool complete) {
  const fs::path dir = root / absl::StrCat("iter-", k);
  fs::create_directories(dir);
  std::ofstream(dir / "stage-0.pt") << "x";
  if (!complete) return;
  CheckpointManifest m = CheckpointManifest::ForJob(OneRankJob("/x", 1, 9));
  m.iteration = k;
  std::ofstream(dir / "manifest.json") << m.ToJson();
  std::ofstream(dir / "rank-0.done") << "{}";
}

// Errors another attempt would meet again are permanent: a full disk, a refusal, a path through a
// regular file (ENOTDIR, what a root-run test can make where chmod blocks nothing); others not.
TEST(JobCheckpointTest, DiskErrorsThatARestartCannotFixArePermanent) {
  TempDir dir;
  std::ofstream(dir.path() / "a-file") << "x";
  std::error_code ec;
  fs::create_directories(dir.path() / "a-file" / "iter-2", ec);
  ASSERT_TRUE(ec);
  const absl::Status not_dir = PermanentIfDiskError(absl::FailedPreconditionError(
      absl::StrCat("checkpoint: cannot create '", (dir.path() / "a-file" / "iter-2").string(),
                   "': ", ec.message())));
  EXPECT_TRUE(IsPermanent(not_dir));
  EXPECT_EQ(not_dir.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsPermanent(PermanentIfDiskError(absl::ResourceExhaustedError("ENOSPC"))));
  EXPECT_TRUE(IsPermanent(PermanentIfDiskError(absl::PermissionDeniedError("EACCES"))));
  EXPECT_FALSE(IsPermanent(PermanentIfDiskError(absl::InternalError("EIO"))));
  EXPECT_FALSE(IsPermanent(PermanentIfDiskError(absl::OkStatus())));
  EXPECT_FALSE(IsPermanent(absl::UnavailableError("peer gone")));
}

TEST(JobCheckpointTest, PruneKeepsTheNewestCompleteOnesAndIncompleteOnesNewerThanThose) {
  TempDir dir;
  const fs::path root = dir.path();
  FakeCheckpoint(root, 1, true);
  FakeCheckpoint(root, 2, false);
  FakeCheckpoint(root, 3, true);
  FakeCheckpoint(root, 4, false);
  FakeCheckpoint(root, 10, true);
  FakeCheckpoint(root, 11, false);  // perhaps still being written
  fs::create_directories(root / "not-a-checkpoint");
  auto none = PruneCheckpoints(root, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty()) << "keep 0 keeps everything";
  auto removed = PruneCheckpoints(root, 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->size(), 3u);
  for (int k : {1, 2, 4}) EXPECT_FALSE(fs::exists(root / absl::StrCat("iter-", k))) << k;
  for (int k : {3, 10, 11}) EXPECT_TRUE(fs::exists(root / absl::StrCat("iter-", k))) << k;
  EXPECT_TRUE(fs::exists(root / "not-a-checkpoint"));
  removed = PruneCheckpoints(root, 1);
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(fs::exists(root / "iter-3"));
  EXPECT_TRUE(fs::exists(root / "iter-11"));
  EXPECT_TRUE(PruneCheckpoints(root / "missing", 1).ok());
}

TEST(JobCheckpointTest, KeepLeavesTheNewestCheckpointsOfARun) {
  TempDir dir;
  JobConfig a = OneRankJob(dir.path(), 1, 5);
  a.settings.checkpoint->keep = 2;
  auto ckpt = JobCheckpointer::Make(a);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto rank = MakeOneRank(a, 1);
  Train(*rank, **ckpt, 0, 5);
  const fs::path root = dir.path() / "ckpt-job";
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"iter-4", "iter-5"}));
}

}  // namespace
}  // namespace zpipe::worker
