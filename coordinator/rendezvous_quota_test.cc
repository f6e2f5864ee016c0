// Rendezvous quota: the byte and key limits per job, what an overwrite counts, and that one job's
// quota leaves the others alone.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/rendezvous.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

TEST(RendezvousQuotaTest, ByteQuotaRefusesTheWriteThatWouldExceedIt) {
  Rendezvous rdv(RendezvousLimits{.job_bytes = 100, .job_keys = 1000});
  rdv.Open("a");
  rdv.Open("b");
  ASSERT_TRUE(rdv.Set("a", "k1", std::string(48, 'x')).ok());  // 2 + 48
  ASSERT_TRUE(rdv.Set("a", "k2", std::string(48, 'x')).ok());  // 100: exactly the quota
  EXPECT_EQ(rdv.JobBytes("a"), 100u);

  absl::Status st = rdv.Set("a", "k3", "x");
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rendezvous quota of job 'a': 100 bytes"));
  EXPECT_TRUE(absl::StrContains(st.message(), "--rendezvous-job-bytes")) << st;
  EXPECT_EQ(rdv.JobBytes("a"), 100u);
  EXPECT_TRUE(absl::IsNotFound(rdv.Get("a", "k3").status()));  // nothing stored

  // Another job has its own quota.
  EXPECT_TRUE(rdv.Set("b", "k1", std::string(98, 'y')).ok());
  EXPECT_EQ(rdv.JobBytes("b"), 100u);

  // Closing frees the quota.
  rdv.Close("a");
  EXPECT_EQ(rdv.JobBytes("a"), 0u);
  rdv.Open("a");
  EXPECT_TRUE(rdv.Set("a", "k3", "x").ok());
}

TEST(RendezvousQuotaTest, OverwriteCountsTheNewSizeOnly) {
  Rendezvous rdv(RendezvousLimits{.job_bytes = 100, .job_keys = 1000});
  rdv.Open("a");
  ASSERT_TRUE(rdv.Set("a", "k", std::string(90, 'x')).ok());
  // 91 + 91 would exceed 100 if both the old and new value counted.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(rdv.Set("a", "k", std::string(90, 'y')).ok());
  EXPECT_EQ(rdv.JobBytes("a"), 91u);
  ASSERT_TRUE(rdv.Set("a", "k", "small").ok());
  EXPECT_EQ(rdv.JobBytes("a"), 6u);
  EXPECT_TRUE(absl::IsResourceExhausted(rdv.Set("a", "k", std::string(100, 'z'))));
  EXPECT_EQ(*rdv.Get("a", "k"), "small");  // a refused overwrite keeps the old value
}

TEST(RendezvousQuotaTest, KeyQuotaRefusesNewKeysButNotOverwrites) {
  Rendezvous rdv(RendezvousLimits{.job_bytes = 1 << 20, .job_keys = 3});
  rdv.Open("a");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rdv.Set("a", absl::StrCat("k", i), "v").ok());
  absl::Status st = rdv.Set("a", "k3", "v");
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "3 keys (the --rendezvous-job-keys limit)")) << st;
  EXPECT_TRUE(rdv.Set("a", "k0", "again").ok());
}

TEST(RendezvousQuotaTest, DefaultsAreDocumented) {
  // docs/operations.md "Security" and zpipe-coordinator --help state these.
  EXPECT_EQ(RendezvousLimits{}.job_bytes, size_t{64} << 20);
  EXPECT_EQ(RendezvousLimits{}.job_keys, 16384u);
}

// Jobs each within their quota together stop at --rendezvous-total-bytes; a job's end frees its
// share, and an overwrite that does not grow still works at the cap.
TEST(RendezvousQuotaTest, TotalCapCoversAllJobsAndIsFreedWhenAJobEnds) {
  Rendezvous rdv(RendezvousLimits{.job_bytes = 100, .job_keys = 1000, .total_bytes = 150});
  rdv.Open("a");
  rdv.Open("b");
  ASSERT_TRUE(rdv.Set("a", "k1", std::string(98, 'x')).ok());  // 100
  ASSERT_TRUE(rdv.Set("b", "k1", std::string(48, 'y')).ok());  // 150 in all
  EXPECT_EQ(rdv.TotalBytes(), 150u);
  absl::Status st = rdv.Set("b", "k2", "z");  // within b's quota, past the total
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "150 bytes of keys and values across all jobs"))
      << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--rendezvous-total-bytes")) << st;
  EXPECT_EQ(rdv.TotalBytes(), 150u);
  EXPECT_TRUE(rdv.Set("b", "k1", std::string(40, 'y')).ok());  // shrinks: 142
  EXPECT_EQ(rdv.TotalBytes(), 142u);
  rdv.Close("a");
  EXPECT_EQ(rdv.TotalBytes(), 42u);
  EXPECT_TRUE(rdv.Set("b", "k2", std::string(50, 'z')).ok());
  EXPECT_EQ(rdv.TotalBytes(), 94u);
}

}  // namespace
}  // namespace zpipe::coordinator
