// Python models end to end on one real cluster (a zpipe-coordinator on loopback and two
// zpipe-worker processes for the whole test):
// - a model whose forward raises fails its job with the Python traceback's last frames in the
//   reason, the whole traceback and the model's print() in `zpipe logs`, and the same worker
//   processes then train the next Python job to SUCCEEDED (profiled cuts: the workers time the
//   Python blocks too);
// - a factory that raises fails the job with its traceback, before any iteration;
// - a model file outside the workers' --data-root fails the job naming the field and the flag;
// - model.python.compile: trace trains, and a block a trace cannot follow (data-dependent control
//   flow) fails its job naming the block and what to do;
// - every worker is still the process it was at the start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace zpipe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kVocab = 32;
constexpr int kSeq = 8;

// Mid raises on its third call (the load's probe and the stage's split probe are the first
// two: the first training forward); it prints on every call.
constexpr char kModelPy[] = R"py(
import torch
from torch import nn

class Mid(nn.Module):
    def __init__(self, hidden, fail):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)
        self.fail = fail
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        print(f"mid forward {self.calls} on {tuple(x.shape)}")
        if self.fail and self.calls >= 3:
            check(x)
        return x + torch.tanh(self.fc(x))

def check(x):
    raise ValueError(f"the model says no to {tuple(x.shape)}")

def build_model(vocab=32, hidden=16, fail=False):
    return nn.Sequential(nn.Embedding(vocab, hidden), Mid(hidden, fail), Mid(hidden, False),
                         nn.Linear(hidden, vocab))

def broken():
    return check(torch.zeros(5))

class Route(nn.Module):
    """Each sample through one of two layers, chosen by its values: a trace freezes the choice."""
    def __init__(self, hidden):
        super().__init__()
        self.a, self.b = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.stack([self.a(r) if r.mean() > 0 else self.b(r) for r in x])

def routed(vocab=32, hidden=16):
    return nn.Sequential(nn.Embedding(vocab, hidden), Route(hidden), Mid(hidden, False),
                         nn.Linear(hidden, vocab))
)py";

class PythonModelE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / absl::StrCat("zpipe-python-e2e-", ::getpid()));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_ / "roots");
    fs::create_directories(*dir_ / "outside");
    std::ofstream(*dir_ / "roots" / "model.py") << kModelPy;
    std::ofstream(*dir_ / "outside" / "model.py") << kModelPy;
    std::ofstream tokens(*dir_ / "roots" / "train.bin", std::ios::binary);
    for (int i = 0; i < 4096; ++i) {
      const uint16_t t = static_cast<uint16_t>((i * 7 + i / 5) % kVocab);
      tokens.write(reinterpret_cast<const char*>(&t), sizeof(t));
    }
    tokens.close();
    testing::LocalClusterOptions o;
    o.coordinator_bin = ZPIPE_COORDINATOR_BIN;
    o.worker_bin = ZPIPE_WORKER_BIN;
    o.data_roots = {(*dir_ / "roots").string()};
    o.worker_args = {"--threads", "1"};
    cluster_ = new testing::LocalCluster(2, o);
    ASSERT_TRUE(cluster_->WaitIdle(2, 60));
    for (int i = 0; i < 2; ++i) pids_.push_back(cluster_->worker(i).pid());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    fs::remove_all(*dir_);
    delete dir_;
  }

  static v1::JobSpec Spec(const std::string& name, const std::string& args,
                          const std::vector<int>& cuts, const std::string& file = "roots/model.py",
                          const std::string& factory = "") {
    v1::JobSpec spec;
    spec.set_name(name);
    auto* py = spec.mutable_model()->mutable_python();
    py->set_file((*dir_ / file).string());
    py->set_factory(factory);
    py->set_args(args);
    for (int c : cuts) py->add_cuts(c);
    spec.mutable_data()->set_path((*dir_ / "roots" / "train.bin").string());
    spec.mutable_data()->set_seq_len(kSeq);
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_schedule()->set_kind("zb-2p");
    spec.mutable_batch()->set_microbatches(4);
    spec.mutable_batch()->set_microbatch_size(2);
    spec.mutable_train()->set_iterations(3);
    spec.mutable_train()->set_lr(1e-3);
    return spec;
  }

  // Submits `spec` and waits for its end.
  static v1::Job Run(const v1::JobSpec& spec) {
    auto submitted = cluster_->client().Submit(spec, spec.name());
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) return {};
    auto job = cluster_->WaitTerminal(spec.name(), 120);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  static std::string Logs(const std::string& job_id) {
    std::vector<std::string> lines;
    absl::Status st = cluster_->client().Logs(job_id, {}, [&](const v1::LogLine& line) {
      lines.push_back(line.text());
      return true;
    });
    EXPECT_TRUE(st.ok()) << st;
    return absl::StrJoin(lines, "\n");
  }

  static fs::path* dir_;
  static testing::LocalCluster* cluster_;
  static std::vector<int> pids_;
};

fs::path* PythonModelE2eTest::dir_ = nullptr;
testing::LocalCluster* PythonModelE2eTest::cluster_ = nullptr;
std::vector<int> PythonModelE2eTest::pids_;

TEST_F(PythonModelE2eTest, AnExceptionFailsTheJobWithItsTracebackAndTheWorkerTrainsTheNext) {
  const v1::Job failed = Run(Spec("raises", R"({"fail": true})", {2}));
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("Python raised"));
  EXPECT_THAT(failed.reason(), HasSubstr("model.py\", line"));
  EXPECT_THAT(failed.reason(), HasSubstr("in check"));
  EXPECT_THAT(failed.reason(), HasSubstr("ValueError: the model says no to (2, 8, 16)"));
  const std::string logs = Logs("raises");
  EXPECT_THAT(logs, HasSubstr("model: mid forward 1 on (2, 8, 16)"));
  EXPECT_THAT(logs, HasSubstr("model: Traceback (most recent call last):"));

  ASSERT_TRUE(cluster_->WaitIdle(2, 60));
  const v1::Job next = Run(Spec("next", "", {}));  // no cuts: the Python blocks are profiled
  EXPECT_EQ(next.state(), v1::JOB_STATE_SUCCEEDED) << next.reason();
  EXPECT_EQ(next.layout().source(), "measured");
}

TEST_F(PythonModelE2eTest, AFactoryThatRaisesFailsTheJobWithItsTraceback) {
  const v1::Job job = Run(Spec("broken", "", {2}, "roots/model.py", "broken"));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("broken()"));
  EXPECT_THAT(job.reason(), HasSubstr("ValueError: the model says no to (5,)"));
}

TEST_F(PythonModelE2eTest, AModelOutsideTheDataRootsIsNeverRun) {
  const v1::Job job = Run(Spec("outside", "", {2}, "outside/model.py"));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("model.python.file"));
  EXPECT_THAT(job.reason(), HasSubstr("--data-root"));
  EXPECT_THAT(Logs("outside"), ::testing::Not(HasSubstr("mid forward")));
}

// model.python.compile: trace reaches the workers: the blocks are traced (the log says so) and
// the job trains; a block with data-dependent control flow fails its job naming the block and
// what to do, and the workers take the next job.
TEST_F(PythonModelE2eTest, TracedBlocksTrainAndAnUntraceableBlockFailsTheJobSayingWhy) {
  v1::JobSpec spec = Spec("traced", "", {2});
  spec.mutable_model()->mutable_python()->set_compile("trace");
  const v1::Job traced = Run(spec);
  EXPECT_EQ(traced.state(), v1::JOB_STATE_SUCCEEDED) << traced.reason();
  EXPECT_THAT(Logs("traced"), HasSubstr("model.python.compile: trace: block 1 ('1') traced"));

  ASSERT_TRUE(cluster_->WaitIdle(2, 60));
  spec = Spec("routed", "", {2}, "roots/model.py", "routed");
  spec.mutable_model()->mutable_python()->set_compile("trace");
  const v1::Job routed = Run(spec);
  EXPECT_EQ(routed.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(routed.reason(), HasSubstr("model.python.compile: trace: block 1 ('1')"));
  EXPECT_THAT(routed.reason(), HasSubstr("depends on the tensors' values"));
  EXPECT_THAT(routed.reason(), HasSubstr("drop model.python.compile"));
}

TEST_F(PythonModelE2eTest, ZzTheWorkersNeverDied) {
  ASSERT_TRUE(cluster_->WaitIdle(2, 60));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cluster_->worker(i).pid(), pids_[i]);
    EXPECT_TRUE(cluster_->worker(i).Running()) << "worker " << i;
  }
}

}  // namespace
}  // namespace zpipe
