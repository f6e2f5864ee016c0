#include "worker/model/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace zpipe::worker::model {
namespace {

SyntheticTokenData Data(uint64_t seed) { return *SyntheticTokenData::Make(seed, 64, 16, 4); }

TEST(SyntheticTokenDataTest, ShapesAndTargetsAreShiftedTokens) {
  const TokenBatch b = Data(1).Microbatch(0, 0, 0);
  ASSERT_EQ(b.tokens.sizes(), torch::IntArrayRef({4, 16}));
  ASSERT_EQ(b.targets.sizes(), torch::IntArrayRef({4, 16}));
  EXPECT_EQ(b.tokens.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.tokens.narrow(1, 1, 15), b.targets.narrow(1, 0, 15)));
  EXPECT_GE(b.tokens.min().item<int64_t>(), 0);
  EXPECT_LT(b.tokens.max().item<int64_t>(), 64);
  EXPECT_LT(b.targets.max().item<int64_t>(), 64);
}

TEST(SyntheticTokenDataTest, PureFunctionOfSeedIterationRankMicrobatch) {
  const SyntheticTokenData a = Data(7), b = Data(7);
  // Request order does not matter, and two instances agree.
  const TokenBatch late = a.Microbatch(5, 1, 3);
  a.Microbatch(0, 0, 0);
  EXPECT_TRUE(torch::equal(late.tokens, b.Microbatch(5, 1, 3).tokens));
  EXPECT_TRUE(torch::equal(late.tokens, a.Microbatch(5, 1, 3).tokens));
  // Every coordinate changes the tokens.
  EXPECT_FALSE(torch::equal(late.tokens, a.Microbatch(4, 1, 3).tokens));
  EXPECT_FALSE(torch::equal(late.tokens, a.Microbatch(5, 0, 3).tokens));
  EXPECT_FALSE(torch::equal(late.tokens, a.Microbatch(5, 1, 2).tokens));
  EXPECT_FALSE(torch::equal(late.tokens, Data(8).Microbatch(5, 1, 3).tokens));
}

TEST(SyntheticTokenDataTest, DataParallelRanksGetDisjointLookingShards) {
  const SyntheticTokenData d = Data(3);
  for (int mb = 0; mb < 4; ++mb) {
    const torch::Tensor r0 = d.Microbatch(0, 0, mb).tokens, r1 = d.Microbatch(0, 1, mb).tokens;
    // Not just different: most positions differ, as for independent samples.
    EXPECT_GT(r0.ne(r1).sum().item<int64_t>(), r0.numel() / 2);
  }
}

TEST(SyntheticTokenDataTest, HasLearnableStructure) {
  // Next-token entropy given the previous token is about ln(kSuccessors), far below ln(vocab).
  const SyntheticTokenData d = *SyntheticTokenData::Make(11, 64, 64, 16);
  std::map<std::pair<int64_t, int64_t>, int> pairs;
  std::map<int64_t, int> firsts;
  for (int mb = 0; mb < 8; ++mb) {
    const TokenBatch b = d.Microbatch(0, 0, mb);
    auto x = b.tokens.accessor<int64_t, 2>();
    auto y = b.targets.accessor<int64_t, 2>();
    for (int i = 0; i < x.size(0); ++i) {
      for (int j = 0; j < x.size(1); ++j) {
        ++pairs[{x[i][j], y[i][j]}];
        ++firsts[x[i][j]];
      }
    }
  }
  double total = 0, entropy = 0;
  for (const auto& [k, n] : firsts) total += n;
  for (const auto& [k, n] : pairs) {
    const double p_joint = n / total, p_cond = static_cast<double>(n) / firsts[k.first];
    entropy -= p_joint * std::log(p_cond);
  }
  EXPECT_LT(entropy, std::log(SyntheticTokenData::kSuccessors) + 0.1);
  EXPECT_GT(entropy, 0.5);
}

TEST(SyntheticTokenDataTest, GlobalBatchConcatenatesRanksThenMicrobatches) {
  const SyntheticTokenData d = Data(5);
  const TokenBatch g = d.GlobalBatch(2, /*dp_size=*/2, /*m=*/3);
  ASSERT_EQ(g.tokens.size(0), 2 * 3 * 4);
  EXPECT_TRUE(torch::equal(g.tokens.narrow(0, 0, 4), d.Microbatch(2, 0, 0).tokens));
  EXPECT_TRUE(torch::equal(g.tokens.narrow(0, 4 * 4, 4), d.Microbatch(2, 1, 1).tokens));
  EXPECT_TRUE(torch::equal(g.targets.narrow(0, 5 * 4, 4), d.Microbatch(2, 1, 2).targets));
}

TEST(SyntheticTokenDataTest, RejectsBadShapes) {
  EXPECT_FALSE(SyntheticTokenData::Make(1, 1, 16, 4).ok());
  EXPECT_FALSE(SyntheticTokenData::Make(1, 64, 0, 4).ok());
  EXPECT_FALSE(SyntheticTokenData::Make(1, 64, 16, 0).ok());
}

}  // namespace
}  // namespace zpipe::worker::model
