// Tuple boundaries: the wire a tuple of tensors travels in, both ways. A single tensor is its own
// wire (no copy); several round-trip through one byte buffer bit for bit, whatever their dtypes;
// a tensor whose shape is not the probed one is refused naming its index and both shapes; only
// the tensors needing grad make up the gradient wire, and the B root built from it hands each
// output exactly its gradient.
#include "worker/model/boundary.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace zpipe::worker::model {
namespace {

// (hidden [2, 3, 4] float, mask [2, 3] bool, ids [2, 3] int64, cache [3, 4] float no grad,
// aux [] float).
BoundarySpec Spec() {
  BoundarySpec spec;
  spec.tensors = {{{{2, 3, 4}, torch::kFloat32}, true},
                  {{{2, 3}, torch::kBool}, false},
                  {{{2, 3}, torch::kLong}, false},
                  {{{3, 4}, torch::kFloat32}, false},
                  {{{}, torch::kFloat32}, true}};
  return spec;
}

std::vector<torch::Tensor> Tensors() {
  torch::manual_seed(1);
  return {torch::randn({2, 3, 4}), torch::rand({2, 3}) > 0.5,
          torch::randint(1000, {2, 3}, torch::kLong), torch::randn({3, 4}), torch::randn({})};
}

TEST(BoundaryTest, ASingleTensorIsItsOwnWire) {
  BoundarySpec spec;
  spec.tensors = {{{{2, 3, 4}, torch::kFloat32}, true}};
  EXPECT_EQ(spec.ActivationWire().shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(spec.GradientWire().shape, (std::vector<int64_t>{2, 3, 4}));
  const torch::Tensor t = torch::randn({2, 3, 4});
  auto wire = PackActivations(spec, {t}, "here");
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_EQ(wire->data_ptr(), t.data_ptr());  // no copy
  auto back = UnpackActivations(spec, *wire, "here");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[0].data_ptr(), t.data_ptr());
}

TEST(BoundaryTest, ATupleRoundTripsBitForBit) {
  const BoundarySpec spec = Spec();
  // 96 + 6 (-> 8) + 48 + 48 + 4 (-> 8) bytes, each 8-aligned.
  EXPECT_EQ(spec.ActivationWire().shape, (std::vector<int64_t>{96 + 8 + 48 + 48 + 8}));
  EXPECT_EQ(spec.ActivationWire().dtype, torch::kUInt8);
  const std::vector<torch::Tensor> in = Tensors();
  auto wire = PackActivations(spec, in, "here");
  ASSERT_TRUE(wire.ok()) << wire.status();
  auto out = UnpackActivations(spec, *wire, "here");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ((*out)[i].scalar_type(), in[i].scalar_type()) << i;
    EXPECT_TRUE(torch::equal((*out)[i], in[i])) << i;
  }
}

TEST(BoundaryTest, AShapeThatIsNotTheProbedOneNamesTheTensorAndBothShapes) {
  std::vector<torch::Tensor> in = Tensors();
  in[2] = torch::zeros({2, 5}, torch::kLong);
  auto wire = PackActivations(Spec(), in, "stage 1 F microbatch 3");
  ASSERT_FALSE(wire.ok());
  const std::string msg(wire.status().message());
  EXPECT_NE(msg.find("stage 1 F microbatch 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  in.pop_back();
  EXPECT_FALSE(PackActivations(Spec(), in, "here").ok());  // a tensor missing
  EXPECT_FALSE(UnpackActivations(Spec(), torch::zeros({7}, torch::kUInt8), "here").ok());
}

TEST(BoundaryTest, OnlyTensorsNeedingGradMakeTheGradientWire) {
  const BoundarySpec spec = Spec();
  EXPECT_EQ(spec.num_grads(), 2);
  EXPECT_EQ(spec.GradientWire().shape, (std::vector<int64_t>{24 + 1}));
  EXPECT_EQ(spec.GradientWire().dtype, torch::kFloat32);
  const torch::Tensor wire = torch::arange(25, torch::kFloat32);
  auto views = GradientViews(spec, wire, "here");
  ASSERT_TRUE(views.ok()) << views.status();
  ASSERT_EQ(views->size(), 2u);
  EXPECT_EQ((*views)[0].sizes(), torch::IntArrayRef({2, 3, 4}));
  EXPECT_EQ((*views)[1].dim(), 0);
  EXPECT_EQ((*views)[1].item<float>(), 24);
}

// The stage's input leaf is the gradient wire, and the root B starts from hands each output
// exactly its gradient: the gradient that reaches the leaf equals torch::autograd::grad of the
// outputs with their gradients.
TEST(BoundaryTest, GradientsFlowExactlyThroughTheFlatLeafAndTheRoot) {
  const BoundarySpec spec = Spec();
  const std::vector<torch::Tensor> in = Tensors();
  torch::Tensor leaf;
  auto args = InputsFromActivations(spec, in, torch::kCPU, &leaf, "here");
  ASSERT_TRUE(args.ok()) << args.status();
  ASSERT_TRUE(leaf.defined());
  EXPECT_EQ(leaf.sizes(), torch::IntArrayRef({25}));
  EXPECT_TRUE((*args)[0].requires_grad());
  EXPECT_FALSE((*args)[3].requires_grad());  // the cache: no gradient
  EXPECT_TRUE(torch::equal((*args)[2], in[2]));
  // A block: hidden' = tanh(hidden * cache) masked, aux' = aux + hidden'.pow(2).mean().
  const torch::Tensor h = torch::tanh((*args)[0] * (*args)[3]) * (*args)[1].unsqueeze(-1);
  const torch::Tensor aux = (*args)[4] + h.pow(2).mean();
  std::vector<torch::Tensor> outs = {h, (*args)[1], (*args)[2], (*args)[3], aux};
  torch::manual_seed(2);
  const torch::Tensor grad_wire = torch::randn({25});
  auto views = GradientViews(spec, grad_wire, "here");
  ASSERT_TRUE(views.ok());
  const torch::Tensor want = torch::autograd::grad({h, aux}, {leaf}, *views, true)[0];
  auto root = MakeGradRoot(spec, outs, grad_wire, "here");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_FALSE(root->grad.defined());
  const torch::Tensor got = torch::autograd::grad({root->root}, {leaf})[0];
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-7)) << (got - want).abs().max();
}

}  // namespace
}  // namespace zpipe::worker::model
