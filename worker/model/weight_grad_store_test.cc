#include "worker/model/weight_grad_store.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace zpipe::worker::model {
namespace {

TEST(WeightGradStoreTest, TakesExactlyOneMicrobatchInPushOrder) {
  WeightGradStore store(3);
  std::vector<std::string> ran;
  ASSERT_TRUE(store.Open(0).ok());
  ASSERT_TRUE(store.Open(1).ok());
  ASSERT_TRUE(store.Push(0, [&] { ran.push_back("0a"); }).ok());
  ASSERT_TRUE(store.Push(1, [&] { ran.push_back("1a"); }).ok());
  ASSERT_TRUE(store.Push(0, [&] { ran.push_back("0b"); }, {3, 4}).ok());
  EXPECT_EQ(store.pending_microbatches(), 2);
  EXPECT_EQ(store.pending_closures(), 3);

  auto work = store.Take(0);
  ASSERT_TRUE(work.ok());
  for (auto& w : *work) w.run();
  EXPECT_EQ(ran, (std::vector<std::string>{"0a", "0b"}));
  EXPECT_EQ((*work)[0].params, std::vector<int>{});
  EXPECT_EQ((*work)[1].params, (std::vector<int>{3, 4}));
  EXPECT_TRUE(store.Contains(1));
  EXPECT_FALSE(store.Contains(0));
}

TEST(WeightGradStoreTest, MisuseIsAnErrorNamingStageAndMicrobatch) {
  WeightGradStore store(2);
  absl::StatusOr<std::vector<WeightGradStore::Work>> none = store.Take(5);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "stage 2 microbatch 5"));

  EXPECT_FALSE(store.Push(5, [] {}).ok());  // not open
  ASSERT_TRUE(store.Open(5).ok());
  EXPECT_FALSE(store.Open(5).ok());  // open twice
  ASSERT_TRUE(store.Take(5).ok());   // empty but open: fine (a stage without linears)
  EXPECT_FALSE(store.Take(5).ok());  // twice
}

TEST(WeightGradStoreTest, DropAndClearForget) {
  WeightGradStore store(0);
  ASSERT_TRUE(store.Open(1).ok());
  ASSERT_TRUE(store.Open(2).ok());
  store.Drop(1);
  store.Drop(7);  // absent: no-op
  EXPECT_EQ(store.pending_microbatches(), 1);
  store.Clear();
  EXPECT_EQ(store.pending_microbatches(), 0);
}

}  // namespace
}  // namespace zpipe::worker::model
