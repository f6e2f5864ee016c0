// GptConfig's one validator (what the coordinator accepts is what the worker builds) and the
// layer split both sides use.
#include "spec/gpt_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace zpipe::spec {
namespace {

using ::testing::HasSubstr;

constexpr GptConfig kGood{/*layers=*/8, /*hidden=*/32, /*heads=*/4, /*seq_len=*/16, /*vocab=*/64};

std::string Error(const GptConfig& config, int stages) {
  const absl::Status st = ValidateGptConfig(config, stages);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  return std::string(st.message());
}

TEST(GptConfigTest, AcceptsEvenAndUnevenSplits) {
  for (int stages : {1, 2, 3, 4, 5, 7, 8}) {
    EXPECT_TRUE(ValidateGptConfig(kGood, stages).ok()) << stages << " stages";
  }
}

TEST(GptConfigTest, EachFieldOutOfRangeIsNamedWithItsRange) {
  GptConfig c = kGood;
  c.layers = 0;
  EXPECT_EQ(Error(c, 1), "spec.model.gpt.layers: must be in [1, 4096], got 0");
  c = kGood;
  c.hidden = 0;
  EXPECT_THAT(Error(c, 1), HasSubstr("spec.model.gpt.hidden: must be in [1, 65536]"));
  c = kGood;
  c.heads = 2000;
  EXPECT_THAT(Error(c, 1), HasSubstr("spec.model.gpt.heads: must be in [1, 1024], got 2000"));
  c = kGood;
  c.seq_len = -1;
  EXPECT_THAT(Error(c, 1), HasSubstr("spec.model.gpt.seq_len"));
  c = kGood;
  c.vocab = 1;
  EXPECT_EQ(Error(c, 1), "spec.model.gpt.vocab: must be in [2, 10000000], got 1");
}

TEST(GptConfigTest, HiddenMustBeAMultipleOfHeads) {
  GptConfig c = kGood;
  c.heads = 3;
  EXPECT_EQ(Error(c, 1), "spec.model.gpt.hidden: must be a multiple of heads (3), got 32");
}

TEST(GptConfigTest, EveryStageNeedsALayer) {
  EXPECT_EQ(Error(kGood, 9),
            "spec.model.gpt.layers: 8 layers cannot fill 9 pipeline stages (pipeline x chunks); "
            "use at least 9 layers or fewer stages");
  EXPECT_THAT(Error(kGood, 0), HasSubstr("stages: 0 must be >= 1"));
}

TEST(GptConfigTest, StageLayersSplitsEvenly) {
  for (int layers : {4, 5, 7, 8}) {
    for (int stages = 1; stages <= layers; ++stages) {
      int next = 0, smallest = layers, largest = 0;
      for (int s = 0; s < stages; ++s) {
        const LayerRange r = StageLayers(layers, stages, s);
        EXPECT_EQ(r.begin, next);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, layers);
      EXPECT_GE(smallest, 1);
      EXPECT_LE(largest - smallest, 1);
    }
  }
  // The first layers % stages stages take the extra layer.
  EXPECT_EQ(StageLayers(7, 3, 0), (LayerRange{0, 3}));
  EXPECT_EQ(StageLayers(7, 3, 1), (LayerRange{3, 5}));
  EXPECT_EQ(StageLayers(7, 3, 2), (LayerRange{5, 7}));
}

}  // namespace
}  // namespace zpipe::spec
