#include "worker/comm/key_value_store.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace zpipe::worker {
namespace {

TEST(InMemoryStoreTest, SetGetOverwrite) {
  auto store = NewInMemoryStore();
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
  ASSERT_TRUE(store->Set("a", "1").ok());
  ASSERT_TRUE(store->Set("a", std::string("2\0x", 3)).ok());
  auto v = store->Get("a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::string("2\0x", 3));
}

TEST(InMemoryStoreTest, EnforcesTheCoordinatorsLimits) {
  auto store = NewInMemoryStore();
  EXPECT_TRUE(absl::IsInvalidArgument(store->Set("", "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Set(std::string(513, 'k'), "x")));
  EXPECT_TRUE(store->Set(std::string(512, 'k'), "x").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(store->Set("k", std::string((1 << 20) + 1, 'v'))));
}

TEST(InMemoryStoreTest, WaitReturnsValuesInKeyOrderOnceAllExist) {
  auto store = NewInMemoryStore();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store->Set("b", "B").ok());
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store->Set("a", "A").ok());
  });
  auto values = store->Wait({"a", "b"}, absl::Now() + absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"A", "B"}));
}

TEST(InMemoryStoreTest, WaitNamesTheMissingKeysAtTheDeadline) {
  auto store = NewInMemoryStore();
  ASSERT_TRUE(store->Set("here", "x").ok());
  const absl::Time start = absl::Now();
  auto values = store->Wait({"here", "gone"}, start + absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(values.status()));
  EXPECT_NE(values.status().message().find("gone"), std::string::npos);
  EXPECT_EQ(values.status().message().find("here"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PrefixStoreTest, PrependsThePrefix) {
  auto base = NewInMemoryStore();
  auto job = NewPrefixStore(*base, "job1/a1/");
  ASSERT_TRUE(job->Set("k", "v").ok());
  EXPECT_EQ(*base->Get("job1/a1/k"), "v");
  EXPECT_EQ((*job->Wait({"k"}, absl::Now()))[0], "v");
  EXPECT_TRUE(absl::IsNotFound(base->Get("k").status()));
}

}  // namespace
}  // namespace zpipe::worker
