#include "client/reduce_exposure.h"

#include <gtest/gtest.h>

namespace zpipe::cli {
namespace {

void Add(v1::RankTrace* r, const std::string& kind, double start, double end, int chunk = 0,
         int bucket = 0) {
  v1::TracedAction* a = r->add_actions();
  a->set_kind(kind);
  a->set_chunk(chunk);
  a->set_bucket(bucket);
  a->set_start(start);
  a->set_end(end);
}

TEST(ReduceExposureTest, SplitsTheFasterReplicasWaitFromTheRestOfTheExposedTime) {
  v1::GetTraceResponse trace;
  // Replica 0 computes until 10 and starts bucket 0 at 8; replica 1 computes until 12 and starts
  // it at 12: the all-reduce runs 12..14 on both, replica 0 waited 8..12, exposed 10..12 of that.
  v1::RankTrace* fast = trace.add_ranks();
  fast->set_data_rank(0);
  Add(fast, "F", 0, 4);
  Add(fast, "BW", 4, 10);
  Add(fast, "REDUCE", 8, 14);
  v1::RankTrace* slow = trace.add_ranks();
  slow->set_data_rank(1);
  Add(slow, "F", 0, 5);
  Add(slow, "SEND_ACT", 5, 5.5);  // not compute: does not hide anything
  Add(slow, "BW", 5, 12);
  Add(slow, "REDUCE", 12, 14);
  const ReduceExposure e = AnalyzeReduceExposure(trace);
  EXPECT_EQ(e.reductions, 2);
  EXPECT_DOUBLE_EQ(e.reduce_s, 6 + 2);
  EXPECT_DOUBLE_EQ(e.exposed_s, 4 + 2);
  EXPECT_DOUBLE_EQ(e.replica_wait_s, 2);
}

TEST(ReduceExposureTest, BucketsAreMatchedByPipelineRankChunkAndBucket) {
  v1::GetTraceResponse trace;
  // Two buckets on one replica pair; a second pipeline rank whose bucket 0 starts much later must
  // not count as the first rank's replica.
  for (int dr = 0; dr < 2; ++dr) {
    v1::RankTrace* r = trace.add_ranks();
    r->set_data_rank(dr);
    r->set_pipeline_rank(0);
    Add(r, "W", 0, 1);
    Add(r, "REDUCE", 1, 2, /*chunk=*/0, /*bucket=*/0);
    Add(r, "REDUCE", dr == 0 ? 2 : 3, 4, /*chunk=*/0, /*bucket=*/1);
  }
  v1::RankTrace* other = trace.add_ranks();
  other->set_pipeline_rank(1);
  Add(other, "W", 0, 1);
  Add(other, "REDUCE", 50, 51, 0, 0);
  const ReduceExposure e = AnalyzeReduceExposure(trace);
  EXPECT_EQ(e.reductions, 5);
  EXPECT_DOUBLE_EQ(e.exposed_s, 1 + 2 + 1 + 1 + 1);
  EXPECT_DOUBLE_EQ(e.replica_wait_s, 1);  // replica 0's bucket 1: 2..3
}

TEST(ReduceExposureTest, NoReductionsNoExposure) {
  v1::GetTraceResponse trace;
  Add(trace.add_ranks(), "F", 0, 1);
  const ReduceExposure e = AnalyzeReduceExposure(trace);
  EXPECT_EQ(e.reductions, 0);
  EXPECT_EQ(e.exposed_s, 0);
  EXPECT_EQ(e.replica_wait_s, 0);
}

}  // namespace
}  // namespace zpipe::cli
