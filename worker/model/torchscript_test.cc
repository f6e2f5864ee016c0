// TorchScript stages: a Sequential built and saved here is loaded, probed (boundary shapes, V),
// cut into stages whose F/B/W give exactly a plain backward's gradients of the whole model (also
// when blocks pass tuples of mixed dtypes and carry an auxiliary loss across cuts); a
// model breaking the block contract is refused naming the block, one whose blocks share a
// parameter naming both, one from a newer torch saying which file format versions meet; export
// writes the trained values back into the same structure.
#include "worker/model/torchscript.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/model/torchscript_archive.h"

namespace zpipe::worker::model {
namespace {

constexpr int kVocab = 32;
constexpr int kHidden = 16;
constexpr int kBatch = 2;
constexpr int kSeq = 8;

void Param(torch::jit::Module& m, const char* name, std::vector<int64_t> shape) {
  m.register_parameter(name, (torch::randn(shape, torch::kFloat64) * 0.3).to(torch::kFloat32),
                       false);
}

torch::jit::Module Block(const char* kind, const std::string& body) {
  torch::jit::Module m(kind);
  Param(m, "w", {kHidden, kHidden});
  Param(m, "b", {kHidden});
  m.define(body);
  return m;
}

// embed | tanh-linear + residual | layer-norm-ish scale | head: four blocks named "0".."3".
// `dropout`: the middle block drops half its update (always: training is on).
torch::jit::Module Model(bool tuple_block = false, bool flat_head = false, bool dropout = false) {
  torch::manual_seed(3);
  torch::jit::Module embed("Embed");
  Param(embed, "weight", {kVocab, kHidden});
  embed.define("def forward(self, x):\n    return torch.embedding(self.weight, x)\n");
  torch::jit::Module mid =
      Block("Mid", tuple_block ? "def forward(self, x):\n    return (x, x)\n"
                   : dropout   ? "def forward(self, x):\n"
                                 "    return x + torch.dropout(torch.tanh(torch.matmul(x, self.w) "
                                 "+ self.b), 0.5, True)\n"
                               : "def forward(self, x):\n"
                                 "    return x + torch.tanh(torch.matmul(x, self.w) + self.b)\n");
  torch::jit::Module norm = Block("Norm",
                                  "def forward(self, x):\n"
                                  "    y = torch.layer_norm(x, [x.size(2)])\n"
                                  "    return torch.gelu(torch.matmul(y, self.w)) * self.b + x\n");
  torch::jit::Module head("Head");
  Param(head, "w", {kHidden, kVocab});
  head.define(flat_head ? "def forward(self, x):\n    return torch.matmul(x, self.w).sum(2)\n"
                        : "def forward(self, x):\n    return torch.matmul(x, self.w)\n");
  torch::jit::Module seq("Sequential");
  seq.register_module("0", embed);
  seq.register_module("1", mid);
  seq.register_module("2", norm);
  seq.register_module("3", head);
  return seq;
}

class TorchScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("zpipe-ts-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Save(torch::jit::Module m, const std::string& name = "model.pt") {
    const std::string path = (dir_ / name).string();
    m.save(path);
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(TorchScriptTest, ProbeFindsBoundariesAndVocab) {
  auto model = TorchScriptModel::Load(Save(Model()), kSeq, kBatch);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->num_blocks(), 4);
  EXPECT_EQ((*model)->vocab(), kVocab);
  EXPECT_EQ((*model)->Boundary(2, 5).ActivationWire().shape,
            (std::vector<int64_t>{5, kSeq, kHidden}));
  EXPECT_EQ((*model)->Boundary(2, 5).ActivationWire().dtype, torch::kFloat32);
}

TEST_F(TorchScriptTest, ContractViolationsNameTheBlock) {
  auto tuple = TorchScriptModel::Load(Save(Model(true), "tuple.pt"), kSeq, kBatch);
  ASSERT_FALSE(tuple.ok());
  EXPECT_NE(tuple.status().message().find("block 1"), std::string::npos) << tuple.status();
  auto flat = TorchScriptModel::Load(Save(Model(false, true), "flat.pt"), kSeq, kBatch);
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("logits"), std::string::npos) << flat.status();
  const std::string junk = (dir_ / "junk.pt").string();
  std::ofstream(junk) << "not a model";
  auto bad = TorchScriptModel::Load(junk, kSeq, kBatch);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk), std::string::npos) << bad.status();
  EXPECT_EQ(TorchScriptModel::Load((dir_ / "missing.pt").string(), kSeq, kBatch).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TorchScriptTest, ParametersSharedBetweenBlocksAreRefusedNamingThem) {
  torch::jit::Module tied = Model();
  torch::jit::Module mid = tied.attr("1").toModule();
  torch::jit::Module norm = tied.attr("2").toModule();
  norm.setattr("w", mid.attr("w"));
  const std::string path = Save(tied, "tied.pt");
  auto model = TorchScriptModel::Load(path, kSeq, kBatch);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* needle : {"block 1 ('1') and block 2 ('2') share a parameter", "'1.w'", "'2.w'",
                             "untie"}) {
    EXPECT_NE(model.status().message().find(needle), std::string::npos) << model.status();
  }
  EXPECT_NE(model.status().message().find(path), std::string::npos) << model.status();
}

TEST_F(TorchScriptTest, AFileFromANewerTorchSaysWhichVersionsMeet) {
  const std::string path = (dir_ / "newer.pt").string();
  {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    writer.setMinVersion(MaxReadableFileFormatVersion() + 1);
    writer.writeRecord("data.pkl", "x", 1);
    writer.writeEndOfFile();
  }
  auto model = TorchScriptModel::Load(path, kSeq, kBatch);
  ASSERT_FALSE(model.ok());
  const std::string max = absl::StrCat(MaxReadableFileFormatVersion());
  for (const std::string& needle :
       {path, std::string("written by a newer torch"),
        absl::StrCat("file format version ", MaxReadableFileFormatVersion() + 1),
        absl::StrCat("LibTorch is ", LibTorchVersion()), absl::StrCat("reads versions up to ", max),
        absl::StrCat("with torch ", LibTorchVersion())}) {
    EXPECT_NE(model.status().message().find(needle), std::string::npos)
        << needle << " in " << model.status();
  }
}

TEST_F(TorchScriptTest, StageBoundaries) {
  EXPECT_EQ(*StageBoundaries({}, 6, 4), (std::vector<int>{0, 2, 4, 5, 6}));
  EXPECT_EQ(*StageBoundaries({1, 5}, 6, 3), (std::vector<int>{0, 1, 5, 6}));
  EXPECT_FALSE(StageBoundaries({3, 3}, 6, 3).ok());
  EXPECT_FALSE(StageBoundaries({}, 3, 4).ok());
  EXPECT_FALSE(StageBoundaries({6}, 6, 2).ok());
}

// Two stages (blocks 0-1 and 2-3), two microbatches, B/W split: every gradient equals a plain
// backward of the whole model on the same tokens.
TEST_F(TorchScriptTest, SplitStagesMatchPlainBackward) {
  const std::string path = Save(Model());
  auto model = TorchScriptModel::Load(path, kSeq, kBatch);
  ASSERT_TRUE(model.ok()) << model.status();
  const int m = 2;
  StageOptions o0{.stage = 0, .num_stages = 2, .num_microbatches = m};
  StageOptions o1{.stage = 1, .num_stages = 2, .num_microbatches = m};
  auto s0 = MakeBlockStage(*model, 0, 2, o0);
  auto s1 = MakeBlockStage(*model, 2, 4, o1);
  ASSERT_TRUE(s0.ok()) << s0.status();
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_FALSE(FusedBackward(**s0));
  EXPECT_FALSE(FusedBackward(**s1));
  torch::manual_seed(5);
  std::vector<torch::Tensor> tokens, targets;
  for (int i = 0; i < m; ++i) {
    tokens.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
    targets.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
  }
  std::map<int, int> landed;
  (*s1)->SetGradObserver([&](int k) { ++landed[100 + k]; });
  (*s0)->SetGradObserver([&](int k) { ++landed[k]; });
  std::vector<torch::Tensor> acts;
  for (int i = 0; i < m; ++i) {
    auto a = (*s0)->Forward(i, tokens[i]);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE((*s1)->Forward(i, *a, &targets[i]).ok());
  }
  for (int i = m - 1; i >= 0; --i) {  // B in reverse order, W interleaved later
    auto g = (*s1)->BackwardInput(i, torch::Tensor());
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE((*s0)->BackwardInput(i, *g).ok());
  }
  for (const ParamInfo& p : (*s1)->params()) {
    EXPECT_FALSE(p.tensor.grad().defined() && p.tensor.grad().abs().sum().item<double>() > 0)
        << p.name << " has a gradient after B alone";
  }
  for (int i = 0; i < m; ++i) {
    { absl::Status w = (*s1)->BackwardWeight(i); ASSERT_TRUE(w.ok()) << w; }
    ASSERT_TRUE((*s0)->BackwardWeight(i).ok());
  }
  EXPECT_EQ((*s0)->pending_microbatches(), 0);
  EXPECT_EQ((*s1)->pending_microbatches(), 0);
  for (const auto& [k, n] : landed) EXPECT_EQ(n, m) << "param " << k;
  EXPECT_EQ(static_cast<int>(landed.size()),
            static_cast<int>((*s0)->params().size() + (*s1)->params().size()));

  torch::jit::Module ref = torch::jit::load(path);
  for (const auto& p : ref.named_parameters(true)) torch::Tensor(p.value).requires_grad_(true);
  for (int i = 0; i < m; ++i) {
    torch::Tensor logits = tokens[i];  // the Sequential's children in order
    for (const auto& child : ref.named_children()) {
      torch::jit::Module block = child.value;
      logits = block.forward({logits}).toTensor();
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}),
                                                              targets[i].reshape({-1})) /
                         m;
    loss.backward();
  }
  std::map<std::string, torch::Tensor> want;
  for (const auto& p : ref.named_parameters(true)) want[p.name] = p.value.grad();
  for (const auto* stage : {s0->get(), s1->get()}) {
    for (const ParamInfo& p : stage->params()) {
      ASSERT_TRUE(want.count(p.name)) << p.name;
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      const double err = (p.tensor.grad() - want[p.name]).abs().max().item<double>() /
                         std::max(want[p.name].abs().max().item<double>(), 1e-12);
      EXPECT_LT(err, 1e-5) << p.name;
    }
  }
}

// Issue 34: a plan's R. Two stages with dropout run F, B, W as usual, and again with each F as
// ForwardAndForget and an R before its B: the same losses, input gradients and parameter
// gradients, bit for bit (dropout draws the same masks at R), and the random generator ends where
// the plain run leaves it.
TEST_F(TorchScriptTest, RecomputedForwardGivesTheSameBits) {
  const std::string path = Save(Model(false, false, /*dropout=*/true));
  const int m = 2;
  torch::manual_seed(5);
  std::vector<torch::Tensor> tokens, targets;
  for (int i = 0; i < m; ++i) {
    tokens.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
    targets.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
  }
  struct Run {
    std::vector<float> losses;
    std::vector<torch::Tensor> input_grads, param_grads;
    torch::Tensor next_draw;  // what the generator gives after the run
  };
  auto run = [&](bool recompute) {
    Run out;
    auto loaded = TorchScriptModel::Load(path, kSeq, kBatch);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    auto s0 = MakeBlockStage(*loaded, 0, 2, {.stage = 0, .num_stages = 2, .num_microbatches = m});
    auto s1 = MakeBlockStage(*loaded, 2, 4, {.stage = 1, .num_stages = 2, .num_microbatches = m});
    EXPECT_TRUE(s0.ok() && s1.ok());
    Stage& a = **s0;
    Stage& b = **s1;
    torch::manual_seed(11);
    for (int i = 0; i < m; ++i) {
      auto act = recompute ? a.ForwardAndForget(i, tokens[i]) : a.Forward(i, tokens[i]);
      EXPECT_TRUE(act.ok()) << act.status();
      auto loss = recompute ? b.ForwardAndForget(i, *act, &targets[i])
                            : b.Forward(i, *act, &targets[i]);
      EXPECT_TRUE(loss.ok()) << loss.status();
    }
    if (recompute) {
      EXPECT_EQ(a.pending_microbatches() + b.pending_microbatches(), 0) << "graphs dropped";
      EXPECT_EQ(a.kept_for_recompute(), m);
    }
    torch::rand({3});  // the run draws on between F and R
    for (int i = m - 1; i >= 0; --i) {
      if (recompute) {
        EXPECT_TRUE(b.Recompute(i).ok());
      }
      auto g = b.BackwardInput(i, torch::Tensor());
      EXPECT_TRUE(g.ok()) << g.status();
      out.input_grads.push_back(*g);
      if (recompute) {
        EXPECT_TRUE(a.Recompute(i).ok());
      }
      EXPECT_TRUE(a.BackwardInput(i, *g).ok());
    }
    for (int i = 0; i < m; ++i) {
      EXPECT_TRUE(b.BackwardWeight(i).ok());
      EXPECT_TRUE(a.BackwardWeight(i).ok());
      out.losses.push_back(*b.Loss(i));
    }
    for (const Stage* s : {&a, &b}) {
      for (const ParamInfo& p : s->params()) out.param_grads.push_back(p.tensor.grad().clone());
    }
    out.next_draw = torch::rand({4});
    EXPECT_EQ(a.Recompute(0).code(), absl::StatusCode::kFailedPrecondition);
    return out;
  };
  const Run plain = run(false);
  const Run recomputed = run(true);
  EXPECT_EQ(recomputed.losses, plain.losses);
  ASSERT_EQ(recomputed.input_grads.size(), plain.input_grads.size());
  for (size_t k = 0; k < plain.input_grads.size(); ++k) {
    EXPECT_TRUE(torch::equal(recomputed.input_grads[k], plain.input_grads[k])) << k;
  }
  ASSERT_EQ(recomputed.param_grads.size(), plain.param_grads.size());
  for (size_t k = 0; k < plain.param_grads.size(); ++k) {
    EXPECT_TRUE(torch::equal(recomputed.param_grads[k], plain.param_grads[k])) << k;
  }
  EXPECT_TRUE(torch::equal(recomputed.next_draw, plain.next_draw));
}

// Blocks passing tuples: (hidden, bool mask, int64 ids, a cache [L, H] from a buffer), then an
// auxiliary loss that later blocks carry; the head returns (logits, aux).
// `short_head`: the head takes four tensors where block 2 returns five.
torch::jit::Module TupleModel(bool short_head = false) {
  torch::manual_seed(4);
  torch::jit::Module embed("TEmbed");
  Param(embed, "weight", {kVocab, kHidden});
  embed.register_buffer("c", torch::randn({kSeq, kHidden}));
  embed.define(
      "def forward(self, x):\n"
      "    return (torch.embedding(self.weight, x), x > 3, x * 2, torch.cos(self.c))\n");
  torch::jit::Module mid = Block("TMid",
                                 "def forward(self, h, m, ids, c):\n"
                                 "    u = torch.tanh(torch.matmul(h * c, self.w) + self.b)\n"
                                 "    y = h + u * m.unsqueeze(-1).to(h.dtype)\n"
                                 "    y = y + 0.01 * ids.unsqueeze(-1).to(h.dtype)\n"
                                 "    return (y, m, ids, c, (y * y).mean() * 0.1)\n");
  torch::jit::Module carry = Block("TCarry",
                                   "def forward(self, h, m, ids, c, aux):\n"
                                   "    y = torch.gelu(torch.matmul(h, self.w)) * self.b + h\n"
                                   "    return (y, m, ids, c, aux + y.abs().mean() * 0.1)\n");
  torch::jit::Module head("THead");
  Param(head, "w", {kHidden, kVocab});
  head.define(short_head
                  ? "def forward(self, h, m, ids, c):\n    return torch.matmul(h, self.w)\n"
                  : "def forward(self, h, m, ids, c, aux):\n"
                    "    return (torch.matmul(h, self.w), aux)\n");
  torch::jit::Module seq("Sequential");
  seq.register_module("0", embed);
  seq.register_module("1", mid);
  seq.register_module("2", carry);
  seq.register_module("3", head);
  return seq;
}

// Three stages cut at every kind of tuple boundary: the probe finds each tensor's shape, dtype,
// batch dependence and whether it needs a gradient; F/B/W over packed wires give exactly a plain
// backward of cross-entropy + aux; a tensor whose shape is not the probed one fails naming it.
TEST_F(TorchScriptTest, TupleBoundariesMatchPlainBackward) {
  const std::string path = Save(TupleModel(), "tuple-model.pt");
  auto model = TorchScriptModel::Load(path, kSeq, kBatch);
  ASSERT_TRUE(model.ok()) << model.status();
  const BoundarySpec b1 = (*model)->Boundary(1, 5);
  ASSERT_EQ(b1.tensors.size(), 4u);
  EXPECT_EQ(b1.tensors[0].spec.shape, (std::vector<int64_t>{5, kSeq, kHidden}));
  EXPECT_EQ(b1.tensors[1].spec.dtype, torch::kBool);
  EXPECT_EQ(b1.tensors[2].spec.dtype, torch::kLong);
  EXPECT_EQ(b1.tensors[3].spec.shape, (std::vector<int64_t>{kSeq, kHidden}));  // no batch
  EXPECT_EQ(b1.num_grads(), 1);  // the cache is computed from a buffer: no gradient
  EXPECT_FALSE(b1.tensors[3].needs_grad);
  const BoundarySpec b2 = (*model)->Boundary(2, kBatch);
  EXPECT_EQ(b2.num_grads(), 2);  // hidden and aux
  EXPECT_TRUE(b2.tensors[4].needs_grad);

  const int m = 2;
  std::vector<std::unique_ptr<Stage>> stages;
  const int cuts[] = {0, 1, 3, 4};
  for (int s = 0; s < 3; ++s) {
    auto st = MakeBlockStage(*model, cuts[s], cuts[s + 1],
                                   {.stage = s, .num_stages = 3, .num_microbatches = m});
    ASSERT_TRUE(st.ok()) << st.status();
    stages.push_back(*std::move(st));
  }
  EXPECT_EQ(stages[0]->OutputSpec(kBatch).dtype, torch::kUInt8);
  EXPECT_EQ(stages[0]->OutputGradSpec(kBatch).shape,
            (std::vector<int64_t>{kBatch, kSeq, kHidden}));  // the hidden gradient itself
  EXPECT_EQ(stages[1]->InputGradSpec(kBatch).shape, stages[0]->OutputGradSpec(kBatch).shape);
  EXPECT_EQ(stages[1]->OutputGradSpec(kBatch).shape,
            (std::vector<int64_t>{kBatch * kSeq * kHidden + 1}));  // hidden + aux, flat
  torch::manual_seed(6);
  std::vector<torch::Tensor> tokens, targets;
  for (int i = 0; i < m; ++i) {
    tokens.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
    targets.push_back(torch::randint(kVocab, {kBatch, kSeq}, torch::kLong));
  }
  std::vector<float> losses;
  for (int i = 0; i < m; ++i) {
    torch::Tensor x = tokens[i];
    for (int s = 0; s < 3; ++s) {
      auto y = stages[s]->Forward(i, x, s == 2 ? &targets[i] : nullptr);
      ASSERT_TRUE(y.ok()) << y.status();
      if (s < 2) { EXPECT_EQ(y->sizes(), torch::IntArrayRef(stages[s]->OutputSpec(kBatch).shape)); }
      x = *y;
    }
    losses.push_back(*stages[2]->Loss(i));
  }
  for (int i = 0; i < m; ++i) {
    torch::Tensor g;
    for (int s = 2; s >= 0; --s) {
      auto gi = stages[s]->BackwardFull(i, g);
      ASSERT_TRUE(gi.ok()) << gi.status();
      if (s > 0) {
        EXPECT_EQ(gi->sizes(), torch::IntArrayRef(stages[s]->InputGradSpec(kBatch).shape));
      }
      g = *gi;
    }
  }
  for (const auto& st : stages) EXPECT_EQ(st->pending_microbatches(), 0);

  torch::jit::Module ref = torch::jit::load(path);
  for (const auto& p : ref.named_parameters(true)) torch::Tensor(p.value).requires_grad_(true);
  for (int i = 0; i < m; ++i) {
    std::vector<torch::jit::IValue> xs = {tokens[i]};
    torch::jit::IValue out;
    for (const auto& child : ref.named_children()) {
      torch::jit::Module block = child.value;
      out = block.forward(xs);
      xs.clear();
      for (const auto& e : out.toTupleRef().elements()) xs.push_back(e);
    }
    torch::Tensor logits = xs[0].toTensor();
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}),
                                                              targets[i].reshape({-1})) +
                         xs[1].toTensor();
    EXPECT_NEAR(loss.item<float>(), losses[i], 1e-5 * std::abs(losses[i]));
    (loss / m).backward();
  }
  std::map<std::string, torch::Tensor> want;
  for (const auto& p : ref.named_parameters(true)) want[p.name] = p.value.grad();
  for (const auto& stage : stages) {
    for (const ParamInfo& p : stage->params()) {
      ASSERT_TRUE(want.count(p.name)) << p.name;
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      const double err = (p.tensor.grad() - want[p.name]).abs().max().item<double>() /
                         std::max(want[p.name].abs().max().item<double>(), 1e-12);
      EXPECT_LT(err, 1e-5) << p.name;
    }
  }

  // A wire that is not the probed boundary's fails naming the stage.
  auto bad = stages[1]->Forward(7, torch::zeros({3}, torch::kUInt8));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stage 1"), std::string::npos) << bad.status();
}

// A block whose next block cannot take its tuple is refused at load, naming both.
TEST_F(TorchScriptTest, ATupleTheNextBlockCannotTakeNamesBothBlocks) {
  auto model = TorchScriptModel::Load(Save(TupleModel(true), "arity.pt"), kSeq, kBatch);
  ASSERT_FALSE(model.ok());
  for (const char* needle : {"block 3 ('3') takes 4 tensor(s)", "block 2 returns a Tuple of 5"}) {
    EXPECT_NE(model.status().message().find(needle), std::string::npos) << model.status();
  }
}

TEST_F(TorchScriptTest, ExportWritesTrainedValuesIntoTheSameStructure) {
  const std::string path = Save(Model());
  auto model = TorchScriptModel::Load(path, 0, 1);  // no probe
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::pair<std::string, torch::Tensor>> values;
  for (const auto& p : (*model)->module().named_parameters(true)) {
    values.emplace_back(p.name, torch::full_like(p.value, 0.5));
  }
  const std::string out = (dir_ / "trained.pt").string();
  ASSERT_TRUE(ExportTorchScript(**model, values, out).ok());
  torch::jit::Module back = torch::jit::load(out);
  int n = 0;
  for (const auto& p : back.named_parameters(true)) {
    EXPECT_TRUE(torch::equal(p.value, torch::full_like(p.value, 0.5))) << p.name;
    ++n;
  }
  EXPECT_EQ(n, static_cast<int>(values.size()));
  values.pop_back();
  auto missing = ExportTorchScript(**model, values, out);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("3.w"), std::string::npos) << missing;
}

}  // namespace
}  // namespace zpipe::worker::model
