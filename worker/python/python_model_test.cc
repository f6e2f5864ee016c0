// Python models in the embedded interpreter: a model.py written here is built by its factory,
// probed like a TorchScript model, and cut into stages whose F/B/W give exactly what torch
// autograd gives on the same module (an nn.Sequential, and a module whose stages() pass tuples);
// tensors cross without copies; a Python exception comes back as a status carrying the
// traceback's last frames while the model keeps working; print() reaches the output sink; a
// broken contract says what to change. With compile: trace (or script) the compiled blocks give
// the same F/B/W without entering Python, run their eval trace in eval mode, and a block a trace
// cannot follow, or a torch that refuses torch.jit, fails saying to drop compile.
#include "worker/python/python_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::python {
namespace {

using model::BlockModel;
using model::ParamInfo;
using model::Stage;
using model::StageOptions;
using ::testing::HasSubstr;

constexpr int kVocab = 32;
constexpr int kBatch = 2;
constexpr int kSeq = 8;

// Four blocks as people write them: an embedding, a residual tanh layer, a norm + GELU layer
// and a head. build_model(fail_at) makes block 1 raise on the call numbered fail_at.
constexpr char kModelPy[] = R"py(
import threading

import torch
from torch import nn

calls = {"mid": 0}

class Mid(nn.Module):
    def __init__(self, hidden, fail_at):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)
        self.fail_at = fail_at

    def forward(self, x):
        calls["mid"] += 1
        if calls["mid"] == self.fail_at:
            helper(x)
        return x + torch.tanh(self.fc(x))

def helper(x):
    raise ValueError(f"boom on a {tuple(x.shape)} input")

class Norm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.ln(x))) + x

class Echo(nn.Module):
    def forward(self, x):
        print("echo", tuple(x.shape))
        return x

def build_model(vocab=32, hidden=16, fail_at=-1):
    return nn.Sequential(nn.Embedding(vocab, hidden), Mid(hidden, fail_at), Norm(hidden),
                         nn.Linear(hidden, vocab))

def echo_model(vocab=32, hidden=16):
    return nn.Sequential(nn.Embedding(vocab, hidden), Echo(), nn.Linear(hidden, vocab))

class Tuples(nn.Module):
    """Not a Sequential: stages() hands out blocks that pass (hidden, mask) along."""
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.body = nn.ModuleList([Gated(hidden), Gated(hidden)])
        self.head = nn.Linear(hidden, vocab)

    def stages(self):
        return [Start(self.embed), *self.body, End(self.head)]

class Start(nn.Module):
    def __init__(self, embed):
        super().__init__()
        self.embed = embed

    def forward(self, ids):
        return self.embed(ids), ids > 3

class Gated(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, h, mask):
        return h + torch.tanh(self.fc(h)) * mask.unsqueeze(-1).to(h.dtype), mask

class End(nn.Module):
    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, h, mask):
        return self.head(h)

thread_calls = threading.local()  # per Python thread state: gone when the state is deleted
released = []

class Mark:
    """Held in thread_calls: collected when its thread's Python thread state is deleted."""
    def __del__(self):
        released.append(1)

class Count(nn.Module):
    """Writes the calls this thread's Python thread state has seen, and the thread states
    deleted so far, into buffers the test reads."""
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("released", torch.zeros(()))

    def forward(self, x):
        if not hasattr(thread_calls, "n"):
            thread_calls.n, thread_calls.mark = 0, Mark()
        thread_calls.n += 1
        self.calls.fill_(thread_calls.n)
        self.released.fill_(len(released))
        return x

def count_model(vocab=32, hidden=16):
    return nn.Sequential(nn.Embedding(vocab, hidden), Count(), nn.Linear(hidden, vocab))

def tuple_model(vocab=32, hidden=16):
    return Tuples(vocab, hidden)

class Route(nn.Module):
    """A toy mixture of experts: each sample goes through one of two layers, chosen by its
    values (data-dependent control flow: a trace freezes the choices of the traced batch)."""
    def __init__(self, hidden):
        super().__init__()
        self.a, self.b = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x):
        return torch.stack([self.a(r) if r.mean() > 0 else self.b(r) for r in x])

def routed_model(vocab=32, hidden=16):
    return nn.Sequential(nn.Embedding(vocab, hidden), Route(hidden), nn.Linear(hidden, vocab))

class Drop(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))

def dropout_model(vocab=32, hidden=16):
    return nn.Sequential(nn.Embedding(vocab, hidden), Drop(hidden), nn.Linear(hidden, vocab))

class NoJit(nn.Linear):
    """A block the patched torch.jit.trace below refuses, as a torch without TorchScript would."""

def no_jit_model(vocab=32, hidden=16):
    trace = torch.jit.trace

    def refusing_trace(module, *args, **kwargs):
        if isinstance(module, NoJit):
            raise RuntimeError("torch.jit is not supported by this build of torch")
        return trace(module, *args, **kwargs)

    torch.jit.trace = refusing_trace
    return nn.Sequential(nn.Embedding(vocab, hidden), NoJit(hidden, hidden),
                         nn.Linear(hidden, vocab))

def not_sequential():
    return nn.Linear(4, 4)

def broken_build():
    return helper(torch.zeros(3))
)py";

class PythonModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("zpipe-py-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "model.py").string();
    std::ofstream(path_) << kModelPy;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<std::shared_ptr<BlockModel>> Load(const std::string& factory,
                                                   const std::string& args = "{}",
                                                   CompileMode compile = CompileMode::kNone) {
    return LoadPythonModel(
        {.file = path_, .factory = factory, .args_json = args, .seed = 7, .compile = compile},
        kSeq, kBatch);
  }

  std::filesystem::path dir_;
  std::string path_;
};

// Plain torch autograd on the same module: every block in order, cross-entropy / m, backward.
std::map<std::string, torch::Tensor> PlainGradients(BlockModel& model,
                                                    const std::vector<torch::Tensor>& tokens,
                                                    const std::vector<torch::Tensor>& targets) {
  for (int k = 0; k < model.num_blocks(); ++k) {
    for (auto& [name, p] : model.BlockParameters(k)) torch::Tensor(p).requires_grad_(true);
  }
  const int m = static_cast<int>(tokens.size());
  for (int i = 0; i < m; ++i) {
    std::vector<torch::Tensor> xs = {tokens[i]};
    for (int k = 0; k < model.num_blocks(); ++k) xs = *model.RunBlock(k, xs);
    torch::Tensor loss = torch::nn::functional::cross_entropy(xs[0].reshape({-1, kVocab}),
                                                              targets[i].reshape({-1})) /
                         m;
    loss.backward();
  }
  std::map<std::string, torch::Tensor> grads;
  for (int k = 0; k < model.num_blocks(); ++k) {
    for (auto& [name, p] : model.BlockParameters(k)) grads[name] = p.grad();
  }
  return grads;
}

// Stages cut at `cuts` run F for every microbatch, B in reverse order and W afterwards; their
// gradients match PlainGradients of a second build of the model (same seed, same weights).
void ExpectStagesMatchPlainBackward(std::shared_ptr<BlockModel> model, BlockModel& reference,
                                    const std::vector<int>& cuts) {
  const int m = 2, num_stages = static_cast<int>(cuts.size()) - 1;
  std::vector<std::unique_ptr<Stage>> stages;
  for (int s = 0; s < num_stages; ++s) {
    StageOptions o{.stage = s, .num_stages = num_stages, .num_microbatches = m};
    auto stage = model::MakeBlockStage(model, cuts[s], cuts[s + 1], o);
    ASSERT_TRUE(stage.ok()) << stage.status();
    EXPECT_FALSE(model::FusedBackward(**stage)) << "stage " << s;
    stages.push_back(*std::move(stage));
  }
  torch::manual_seed(5);
  std::vector<torch::Tensor> tokens, targets;
  for (int i = 0; i < m; ++i) {
    tokens.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
    targets.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
  }
  for (int i = 0; i < m; ++i) {
    torch::Tensor x = tokens[i];
    for (int s = 0; s < num_stages; ++s) {
      auto y = stages[s]->Forward(i, x, s + 1 == num_stages ? &targets[i] : nullptr);
      ASSERT_TRUE(y.ok()) << y.status();
      x = *y;
    }
  }
  for (int i = m - 1; i >= 0; --i) {
    torch::Tensor g;
    for (int s = num_stages - 1; s >= 0; --s) {
      auto gi = stages[s]->BackwardInput(i, g);
      ASSERT_TRUE(gi.ok()) << gi.status();
      g = *gi;
    }
  }
  for (const auto& stage : stages) {
    for (const ParamInfo& p : stage->params()) {
      EXPECT_FALSE(p.tensor.grad().defined() && p.tensor.grad().abs().sum().item<double>() > 0)
          << p.name << " has a gradient after B alone";
    }
  }
  for (int i = 0; i < m; ++i) {
    for (const auto& stage : stages) ASSERT_TRUE(stage->BackwardWeight(i).ok());
  }
  const auto want = PlainGradients(reference, tokens, targets);
  size_t compared = 0;
  for (const auto& stage : stages) {
    EXPECT_EQ(stage->pending_microbatches(), 0);
    for (const ParamInfo& p : stage->params()) {
      ASSERT_TRUE(want.count(p.name)) << p.name;
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      const torch::Tensor& w = want.at(p.name);
      const double err = (p.tensor.grad() - w).abs().max().item<double>() /
                         std::max(w.abs().max().item<double>(), 1e-12);
      EXPECT_LT(err, 1e-6) << p.name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, want.size());
}

TEST_F(PythonModelTest, SequentialStagesMatchTorchAutograd) {
  auto model = Load("build_model");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->num_blocks(), 4);
  EXPECT_EQ((*model)->vocab(), kVocab);
  std::vector<std::string> names;
  for (auto& [name, p] : (*model)->BlockParameters(2)) names.push_back(name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("2.ln.weight", "2.ln.bias", "2.fc.weight", "2.fc.bias"));
  auto reference = Load("build_model");
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectStagesMatchPlainBackward(*model, **reference, {0, 2, 4});
}

TEST_F(PythonModelTest, StagesOfAModulePassTuplesUnderTheModulesNames) {
  auto model = Load("tuple_model");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->num_blocks(), 4);
  EXPECT_EQ((*model)->block_name(1), "body.0");
  EXPECT_EQ((*model)->block_name(0), "0");  // made by stages(), not held by the module
  EXPECT_EQ((*model)->Boundary(1, kBatch).tensors.size(), 2u);
  std::vector<std::string> names;
  for (auto& [name, p] : (*model)->BlockParameters(3)) names.push_back(name);
  EXPECT_THAT(names, ::testing::ElementsAre("head.weight", "head.bias"));
  auto reference = Load("tuple_model");
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectStagesMatchPlainBackward(*model, **reference, {0, 1, 3, 4});
}

TEST_F(PythonModelTest, TensorsCrossWithoutCopies) {
  auto model = Load("echo_model");
  ASSERT_TRUE(model.ok()) << model.status();
  torch::Tensor x = torch::randn({kBatch, kSeq, 16});
  auto out = (*model)->RunBlock(1, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].unsafeGetTensorImpl(), x.unsafeGetTensorImpl());
}

// A job runs on a thread that did not start Python. Its calls must share one Python thread state
// (interpreter.h ScopedGil) rather than make and delete one per call, which made the Python path
// slower than TorchScript's by more than the forward's own cost; what a threading.local holds
// lives as long as the state, so the model counts its calls in one. The state is deleted when
// its thread exits, not leaked.
TEST_F(PythonModelTest, AThreadKeepsOnePythonThreadStateUntilItExits) {
  auto model = Load("count_model");  // its probe calls block 1 on this thread
  ASSERT_TRUE(model.ok()) << model.status();
  auto buffer = [&](int i) { return (*model)->BlockBuffers(1)[i].item<double>(); };
  const torch::Tensor x = torch::zeros({kBatch, kSeq, 16});
  std::thread([&] {
    for (int call = 1; call <= 3; ++call) {
      ASSERT_TRUE((*model)->RunBlock(1, {x}).ok());
      EXPECT_EQ(buffer(0), call) << "the thread's Python state was not kept between calls";
    }
  }).join();
  const double released = buffer(1);
  std::thread([&] {
    ASSERT_TRUE((*model)->RunBlock(1, {x}).ok());
    EXPECT_EQ(buffer(0), 1) << "a new thread, a new state";
    EXPECT_EQ(buffer(1), released + 1) << "the first thread's state outlived its thread";
  }).join();
}

TEST_F(PythonModelTest, PrintsReachTheOutputSink) {
  std::mutex mu;
  std::vector<std::string> lines;
  SetPythonOutput([&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(line);
  });
  auto model = Load("echo_model");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->RunBlock(1, {torch::zeros({3, 4, 16})}).ok());
  SetPythonOutput(nullptr);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(lines, ::testing::Contains("echo (3, 4, 16)"));
}

TEST_F(PythonModelTest, AnExceptionIsAStatusWithTheTracebackAndTheModelGoesOn) {
  // Call 1 is the probe's; call 2 the stage's split probe; call 3 the first training forward.
  auto model = Load("build_model", R"({"fail_at": 3})");
  ASSERT_TRUE(model.ok()) << model.status();
  StageOptions o{.stage = 0, .num_stages = 2, .num_microbatches = 1};
  auto stage = model::MakeBlockStage(*model, 0, 2, o);
  ASSERT_TRUE(stage.ok()) << stage.status();
  torch::Tensor tokens = torch::zeros({kBatch, kSeq}, torch::kLong);
  auto failed = (*stage)->Forward(0, tokens);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  const std::string why(failed.status().message());
  EXPECT_THAT(why, HasSubstr("stage 0 F microbatch 0: block 1 ('1'): Python raised:"));
  EXPECT_THAT(why, HasSubstr("model.py\", line"));
  EXPECT_THAT(why, HasSubstr("in helper"));
  EXPECT_THAT(why, HasSubstr("ValueError: boom on a (2, 8, 16) input"));
  (*stage)->FreeMicrobatch(0);
  auto again = (*stage)->Forward(0, tokens);
  EXPECT_TRUE(again.ok()) << again.status();
}

// compile: trace and script. The compiled blocks' F/B/W give what autograd gives on the eager
// module (the same parameters: the reference is eager), B and W split, for one tensor and for
// tuples (a bool mask) crossing.
TEST_F(PythonModelTest, CompiledStagesMatchTorchAutograd) {
  for (const auto& [factory, mode] : {std::pair{"build_model", CompileMode::kTrace},
                                      {"tuple_model", CompileMode::kTrace},
                                      {"tuple_model", CompileMode::kScript}}) {
    SCOPED_TRACE(absl::StrCat(factory, " ", CompileModeName(mode)));
    auto model = Load(factory, "{}", mode);
    ASSERT_TRUE(model.ok()) << model.status();
    auto reference = Load(factory);
    ASSERT_TRUE(reference.ok()) << reference.status();
    ExpectStagesMatchPlainBackward(*model, **reference,
                                   std::string(factory) == "build_model"
                                       ? std::vector<int>{0, 2, 4}
                                       : std::vector<int>{0, 1, 3, 4});
  }
}

// A traced block's F runs its TorchScript graph, not the Python forward: the forward's print()
// ran while it was traced and checked, and not again.
TEST_F(PythonModelTest, ATracedForwardDoesNotEnterPython) {
  auto model = Load("echo_model", "{}", CompileMode::kTrace);
  ASSERT_TRUE(model.ok()) << model.status();
  StageOptions o{.stage = 0, .num_stages = 1, .num_microbatches = 1};
  auto stage = model::MakeBlockStage(*model, 0, 3, o);  // traces the blocks
  ASSERT_TRUE(stage.ok()) << stage.status();
  std::mutex mu;
  std::vector<std::string> lines;
  SetPythonOutput([&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(line);
  });
  const torch::Tensor tokens = torch::zeros({kBatch, kSeq}, torch::kLong);
  auto loss = (*stage)->Forward(0, tokens, &tokens);
  SetPythonOutput(nullptr);
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(lines, ::testing::IsEmpty());
}

// Moving a block (a CUDA stage's, onto its device) drops its traces: block.to() gives it new
// buffer tensors and a trace holds its device's constants, so the next run traces it again there.
TEST_F(PythonModelTest, AMovedBlockIsTracedAgain) {
  auto model = Load("build_model", "{}", CompileMode::kTrace);
  ASSERT_TRUE(model.ok()) << model.status();
  std::mutex mu;
  std::vector<std::string> lines;
  SetPythonOutput([&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    if (line.find("block 1 ('1') traced") != std::string_view::npos) lines.emplace_back(line);
  });
  const torch::Tensor x = torch::randn({kBatch, kSeq, 16});
  auto first = (*model)->RunBlock(1, {x});
  auto again = (*model)->RunBlock(1, {x});
  (*model)->MoveBlock(1, torch::Device(torch::kCPU));
  auto moved = (*model)->RunBlock(1, {x});
  SetPythonOutput(nullptr);
  ASSERT_TRUE(first.ok() && again.ok() && moved.ok());
  EXPECT_TRUE(torch::equal((*first)[0], (*moved)[0]));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(lines.size(), 2u) << "traced on the first run and after the move, not in between";
}

// Training forwards run the trace made in training mode (dropout draws), eval forwards the one
// made in eval mode (no dropout: the eager module's eval loss, every time).
TEST_F(PythonModelTest, ATracedBlockRunsItsEvalTraceInEvalMode) {
  auto model = Load("dropout_model", "{}", CompileMode::kTrace);
  ASSERT_TRUE(model.ok()) << model.status();
  auto eager = Load("dropout_model");
  ASSERT_TRUE(eager.ok()) << eager.status();
  StageOptions o{.stage = 0, .num_stages = 1, .num_microbatches = 1};
  auto stage = model::MakeBlockStage(*model, 0, 3, o);
  auto eager_stage = model::MakeBlockStage(*eager, 0, 3, o);
  ASSERT_TRUE(stage.ok()) << stage.status();
  ASSERT_TRUE(eager_stage.ok()) << eager_stage.status();
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(kVocab, {kBatch, kSeq}, torch::kLong);
  auto loss = [&](Stage& s) {
    auto l = s.Forward(0, tokens, &tokens);
    EXPECT_TRUE(l.ok()) << l.status();
    s.FreeMicrobatch(0);
    return l.ok() ? l->item<double>() : 0.0;
  };
  const double train1 = loss(**stage), train2 = loss(**stage);
  EXPECT_NE(train1, train2) << "dropout draws differ from one training forward to the next";
  (*stage)->SetTraining(false);
  (*eager_stage)->SetTraining(false);
  const double eval1 = loss(**stage), eval2 = loss(**stage);
  EXPECT_EQ(eval1, eval2);
  EXPECT_NEAR(eval1, loss(**eager_stage), 1e-6 * std::abs(eval1));
}

// A block whose control flow depends on its tensors' values cannot be traced faithfully: the
// check against its eager forward fails the stage, naming the block and saying what to do.
TEST_F(PythonModelTest, ATraceThatDiffersFromTheForwardFailsNamingTheBlock) {
  auto model = Load("routed_model", "{}", CompileMode::kTrace);
  ASSERT_TRUE(model.ok()) << model.status();  // the probe runs the eager forward
  StageOptions o{.stage = 0, .num_stages = 1, .num_microbatches = 1};
  auto stage = model::MakeBlockStage(*model, 0, 3, o);
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kInvalidArgument) << stage.status();
  const std::string why(stage.status().message());
  EXPECT_THAT(why, HasSubstr("model.python.compile: trace: block 1 ('1') in training mode"));
  EXPECT_THAT(why, HasSubstr("depends on the tensors' values"));
  EXPECT_THAT(why, HasSubstr("model.py:"));  // the line the tracer warned about
  EXPECT_THAT(why, HasSubstr("drop model.python.compile"));
}

// A torch that refuses torch.jit (newer releases may): the stage fails naming the block, the torch
// and what to do; without compile the same model trains.
TEST_F(PythonModelTest, ATorchThatRefusesJitFailsSayingToDropCompile) {
  auto model = Load("no_jit_model", "{}", CompileMode::kTrace);
  ASSERT_TRUE(model.ok()) << model.status();
  StageOptions o{.stage = 0, .num_stages = 1, .num_microbatches = 1};
  auto stage = model::MakeBlockStage(*model, 0, 3, o);
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kInvalidArgument) << stage.status();
  const std::string why(stage.status().message());
  EXPECT_THAT(why,
              HasSubstr("model.python.compile: trace: block 1 ('1') in training mode: torch "));
  EXPECT_THAT(why, HasSubstr("cannot trace it (RuntimeError: torch.jit is not supported"));
  EXPECT_THAT(why, HasSubstr("drop model.python.compile"));
  auto eager = Load("no_jit_model");
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_TRUE(model::MakeBlockStage(*eager, 0, 3, o).ok());
}

TEST_F(PythonModelTest, BrokenContractsSayWhatToChange) {
  auto missing = Load("no_such_factory");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("defines no function no_such_factory()"));
  auto linear = Load("not_sequential");
  EXPECT_EQ(linear.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(linear.status().message(), HasSubstr("give the module a stages() method"));
  auto raised = Load("broken_build");
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(raised.status().message(), HasSubstr("ValueError: boom on a (3,) input"));
  auto bad_args = Load("build_model", R"({"width": 3})");
  EXPECT_THAT(bad_args.status().message(), HasSubstr("unexpected keyword argument 'width'"));
  auto nowhere = LoadPythonModel({.file = (dir_ / "nowhere.py").string(),
                                  .factory = "build_model",
                                  .args_json = "",
                                  .seed = 0},
                                 kSeq, kBatch);
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace zpipe::worker::python
