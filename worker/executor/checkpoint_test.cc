// Stage checkpoints: p pipeline ranks (x d data ranks) run as threads over the TCP streams on loopback.
// A run saves after some iteration and goes on; a second run builds fresh stages (from another
// seed) and a fresh optimizer, loads the checkpoint and runs the same iterations: parameters and
// optimizer state right after loading equal what was saved, and the following iterations give
// the same losses, gradients and parameters as the uninterrupted run. Also: mismatched models,
// optimizers, missing and corrupt files, and unwritable directories give errors naming the
// problem.
#include "worker/executor/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/executor/testing/pipeline_harness.h"
#include "worker/executor/testing/temp_dir.h"
#include "worker/model/gpt.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSeed = 7;
constexpr int kMicrobatchSize = 2;

model::GptConfig SmallGpt(int stages, int hidden = 16) {
  return model::GptConfig{
      .layers = std::max(4, stages), .hidden = hidden, .heads = 2, .seq_len = 8, .vocab = 32};
}

// One directory per test.
class TempDir : public testing::TempDir {
 public:
  TempDir()
      : testing::TempDir(absl::StrCat(
            "zpipe-ckpt-test-", ::testing::UnitTest::GetInstance()->current_test_info()->line())) {}
};

// Parameters and optimizer state by "<param name>" and "<param name>/<state field>".
using Snapshot = std::map<std::string, torch::Tensor>;

Snapshot Take(const Executor& exec) {
  Snapshot out;
  const torch::optim::Optimizer* opt = exec.optimizer();
  for (const auto& stage : exec.stages()) {
    for (const model::ParamInfo& p : stage->params()) {
      out[p.name] = p.tensor.detach().clone();
      if (opt == nullptr) continue;
      auto it = opt->state().find(OptimizerStateKey(p.tensor));
      if (it == opt->state().end()) continue;
      if (auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get())) {
        out[p.name + "/step"] = torch::tensor(a->step());
        out[p.name + "/exp_avg"] = a->exp_avg().clone();
        out[p.name + "/exp_avg_sq"] = a->exp_avg_sq().clone();
      } else if (auto* b = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get())) {
        out[p.name + "/step"] = torch::tensor(b->step());
        out[p.name + "/exp_avg"] = b->exp_avg().clone();
        out[p.name + "/exp_avg_sq"] = b->exp_avg_sq().clone();
      } else if (auto* c = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
        if (c->momentum_buffer().defined()) {
          out[p.name + "/momentum_buffer"] = c->momentum_buffer().clone();
        }
      }
    }
  }
  return out;
}

Snapshot Grads(const Executor& exec) {
  Snapshot out;
  for (const auto& stage : exec.stages()) {
    for (const model::ParamInfo& p : stage->params()) {
      out[p.name] = p.tensor.grad().defined() ? p.tensor.grad().clone() : torch::Tensor();
    }
  }
  return out;
}

void ExpectEqual(const Snapshot& got, const Snapshot& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << what << ": " << name;
    const torch::Tensor& g = got.at(name);
    ASSERT_EQ(g.defined(), w.defined()) << what << ": " << name;
    if (w.defined()) {
      EXPECT_TRUE(torch::equal(g, w)) << what << ": " << name;
    }
  }
}

struct Case {
  core::ScheduleKind kind;
  int p;
  int d;
  std::string optimizer;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << core::ScheduleName(c.kind) << " p=" << c.p << " d=" << c.d << " " << c.optimizer;
}

struct RunOptions {
  int first_iteration = 0;
  int iterations = 0;  // run [first_iteration, iterations)
  uint64_t init_seed = kSeed;
  std::optional<fs::path> load_from;  // before the first iteration, every rank
  std::optional<fs::path> save_to;    // after iteration `save_after`, data rank 0 only
  int save_after = -1;
};

struct RunResult {
  std::map<int, double> losses;  // by iteration, mean over data ranks
  Snapshot at_save;              // data rank 0, every pipeline rank, when saving
  Snapshot after_load;           // data rank 0, right after loading
  Snapshot grads;                // data rank 0, after the last iteration
  Snapshot final_state;          // data rank 0, after the last iteration
};

absl::StatusOr<RunResult> RunPipeline(const Case& c, const RunOptions& o) {
  static int run_counter = 0;
  auto lowered = testing::LoweredPlan(c.kind, c.p, /*m=*/4);
  if (!lowered.ok()) return lowered.status();
  testing::RankOptions ro;
  ro.key_prefix = absl::StrCat("ckpt-test/", ::getpid(), "/", run_counter++, "/");
  ro.data_size = c.d;
  ro.gpt = SmallGpt(lowered->num_stages());
  ro.init_seed = o.init_seed;
  ro.config.microbatch_size = kMicrobatchSize;
  ro.config.optimizer = ParseOptimizer(c.optimizer).value();
  ro.config.lr = 3e-3;
  ro.grad_sync.bucket_bytes = 4096;
  auto data = model::SyntheticTokenData::Make(kSeed, ro.gpt.vocab, ro.gpt.seq_len, kMicrobatchSize);
  if (!data.ok()) return data.status();
  auto store = NewInMemoryStore();
  std::mutex mu;
  RunResult result;
  absl::Status status = testing::RunOnThreads(c.p * c.d, [&](int g) -> absl::Status {
    const int r = g % c.p, dr = g / c.p;
    auto rank = testing::MakePipelineRank(*lowered, r, dr, ro, *store, &*data, nullptr);
    if (!rank.ok()) return rank.status();
    Executor& exec = *rank->exec;
    if (o.load_from) {
      if (absl::Status st = LoadStageCheckpoints(exec, *o.load_from); !st.ok()) return st;
      if (dr == 0) {
        Snapshot s = Take(exec);
        std::lock_guard<std::mutex> lock(mu);
        result.after_load.merge(s);
      }
    }
    for (int it = o.first_iteration; it < o.iterations; ++it) {
      auto summary = exec.RunIteration(it);
      if (!summary.ok()) return summary.status();
      if (summary->loss) {
        std::lock_guard<std::mutex> lock(mu);
        result.losses[it] += *summary->loss / c.d;
      }
      if (o.save_to && it == o.save_after && dr == 0) {
        if (absl::Status st = SaveStageCheckpoints(exec, *o.save_to); !st.ok()) return st;
        Snapshot s = Take(exec);
        std::lock_guard<std::mutex> lock(mu);
        result.at_save.merge(s);
      }
    }
    if (dr != 0) return absl::OkStatus();
    Snapshot grads = Grads(exec);
    Snapshot state = Take(exec);
    std::lock_guard<std::mutex> lock(mu);
    result.grads.merge(grads);
    result.final_state.merge(state);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return result;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = absl::StrCat(core::ScheduleName(info.param.kind), "_p", info.param.p, "_d",
                                  info.param.d, "_", info.param.optimizer);
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

class CheckpointResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointResumeTest, ResumedRunMatchesTheUninterruptedOne) {
  const Case c = GetParam();
  TempDir dir;
  // Uninterrupted: iterations 0..4, checkpoint after iteration 2 (3 done).
  RunOptions save;
  save.iterations = 5;
  save.save_to = dir.path();
  save.save_after = 2;
  auto full = RunPipeline(c, save);
  ASSERT_TRUE(full.ok()) << full.status();
  const int stages = core::PlacementFor(c.kind, c.p).num_stages();
  for (int s = 0; s < stages; ++s) {
    EXPECT_TRUE(fs::exists(dir.path() / StageCheckpointFileName(s))) << s;
  }
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().extension(), ".pt") << "left behind: " << entry.path();
  }
  if (c.optimizer != "sgd") {  // plain SGD keeps no state
    int moments = 0;
    for (const auto& [key, value] : full->at_save) moments += absl::EndsWith(key, "/exp_avg");
    EXPECT_GT(moments, 0) << "the optimizer has state to save";
  }

  // Resumed: fresh stages from another seed, fresh optimizer, load, iterations 3..4.
  RunOptions load;
  load.first_iteration = 3;
  load.iterations = 5;
  load.init_seed = kSeed + 100;
  load.load_from = dir.path();
  auto resumed = RunPipeline(c, load);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ExpectEqual(resumed->after_load, full->at_save, "state right after loading");
  for (int it = 3; it < 5; ++it) {
    ASSERT_TRUE(resumed->losses.count(it)) << it;
    EXPECT_EQ(resumed->losses.at(it), full->losses.at(it)) << "iteration " << it;
  }
  ExpectEqual(resumed->grads, full->grads, "gradients of the last iteration");
  ExpectEqual(resumed->final_state, full->final_state, "parameters and optimizer state at the end");

  // Without the checkpoint the other seed gives another loss: loading is what made them equal.
  RunOptions fresh = load;
  fresh.load_from.reset();
  fresh.iterations = 4;
  auto unloaded = RunPipeline(c, fresh);
  ASSERT_TRUE(unloaded.ok()) << unloaded.status();
  EXPECT_NE(unloaded->losses.at(3), full->losses.at(3));
}

INSTANTIATE_TEST_SUITE_P(Schedules, CheckpointResumeTest,
                         ::testing::Values(Case{core::ScheduleKind::kZbV, 2, 1, "adamw"},
                                           Case{core::ScheduleKind::k1F1B, 2, 2, "adam"},
                                           Case{core::ScheduleKind::kZbH1, 2, 1, "sgd"}),
                         CaseName);

// One rank, one stage: for the error cases, which need no pipeline.
struct SingleRank {
  std::unique_ptr<KeyValueStore> store = NewInMemoryStore();
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Executor> exec;
};

SingleRank MakeSingleRank(int hidden, const std::string& optimizer) {
  SingleRank out;
  core::ScheduleRequest req;
  req.pipeline = 1;
  req.microbatches = 1;
  req.cost = core::CostModel::Uniform(1, core::StageCost{});
  auto plan = core::GenerateSchedule(core::ScheduleKind::k1F1B, req);
  EXPECT_TRUE(plan.ok()) << plan.status();
  CommunicatorOptions opts;
  opts.pipeline_size = 1;
  auto comm = NewTcpCommunicator(opts, *out.store);
  EXPECT_TRUE(comm.ok()) << comm.status();
  out.comm = *std::move(comm);
  model::StageOptions so;
  auto stage = model::MakeGptStage(SmallGpt(1, hidden), so);
  EXPECT_TRUE(stage.ok()) << stage.status();
  std::vector<std::unique_ptr<model::Stage>> stages;
  stages.push_back(*std::move(stage));
  ExecutorConfig config;
  config.optimizer = ParseOptimizer(optimizer).value();
  auto exec =
      Executor::Make(*plan, 0, 0, config, std::move(stages), *out.comm, nullptr, nullptr, nullptr);
  EXPECT_TRUE(exec.ok()) << exec.status();
  out.exec = *std::move(exec);
  return out;
}

TEST(CheckpointTest, AnotherModelShapeIsRejectedNamingTheParameterAndLeavesStateAlone) {
  TempDir dir;
  SingleRank small = MakeSingleRank(16, "adamw");
  ASSERT_TRUE(SaveStageCheckpoints(*small.exec, dir.path()).ok());
  SingleRank wide = MakeSingleRank(32, "adamw");
  const Snapshot before = Take(*wide.exec);
  absl::Status st = LoadStageCheckpoints(*wide.exec, dir.path());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("stage-0.pt"), std::string::npos) << st;
  EXPECT_NE(st.message().find("[32, 16]"), std::string::npos) << st;  // theirs vs ours
  EXPECT_NE(st.message().find("here"), std::string::npos) << st;
  ExpectEqual(Take(*wide.exec), before, "untouched after a failed load");
}

TEST(CheckpointTest, AnotherOptimizerIsRejected) {
  TempDir dir;
  SingleRank adamw = MakeSingleRank(16, "adamw");
  ASSERT_TRUE(SaveStageCheckpoints(*adamw.exec, dir.path()).ok());
  SingleRank sgd = MakeSingleRank(16, "sgd");
  absl::Status st = LoadStageCheckpoints(*sgd.exec, dir.path());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("'adamw'"), std::string::npos) << st;
  EXPECT_NE(st.message().find("'sgd'"), std::string::npos) << st;
}

TEST(CheckpointTest, MissingAndCorruptFilesAreErrorsNamingTheFile) {
  TempDir dir;
  SingleRank one = MakeSingleRank(16, "adamw");
  absl::Status missing = LoadStageCheckpoints(*one.exec, dir.path());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find((dir.path() / "stage-0.pt").string()), std::string::npos)
      << missing;
  std::ofstream(dir.path() / "stage-0.pt") << "not an archive";
  absl::Status corrupt = LoadStageCheckpoints(*one.exec, dir.path());
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss) << corrupt;
  EXPECT_NE(corrupt.message().find("stage-0.pt"), std::string::npos) << corrupt;
}

TEST(CheckpointTest, UnwritableDirectoryIsAnErrorNamingThePath) {
  TempDir dir;
  std::ofstream(dir.path() / "a-file") << "x";
  const fs::path bad = dir.path() / "a-file" / "sub";  // under a regular file: even root fails
  SingleRank one = MakeSingleRank(16, "adamw");
  absl::Status st = SaveStageCheckpoints(*one.exec, bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(bad.string()), std::string::npos) << st;
  absl::Status file = WriteFileAtomically(bad / "x.json", "{}");
  EXPECT_FALSE(file.ok());
  EXPECT_NE(file.message().find((bad / "x.json").string()), std::string::npos) << file;
}

TEST(CheckpointTest, WriteFileAtomicallyReplacesAndLeavesNoTemporaryFile) {
  TempDir dir;
  const fs::path f = dir.path() / "m.json";
  ASSERT_TRUE(WriteFileAtomically(f, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(f, "two").ok());
  std::ifstream in(f);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "two");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace zpipe::worker
