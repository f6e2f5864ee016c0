// A rank's iteration stats survive the trip through zpipe.v1.RankIterationStats field for field.
#include "coordinator/job_proto.h"

#include <gtest/gtest.h>

namespace zpipe::coordinator {
namespace {

TEST(JobProtoTest, RankStatsRoundTripEveryField) {
  RankStats s;
  s.pipeline_rank = 3;
  s.data_rank = 1;
  s.duration_s = 1.5;
  s.busy_s = 1.25;
  s.idle_s = 0.25;
  s.forward_s = 0.4;
  s.backward_s = 0.5;
  s.weight_s = 0.35;
  s.bubble_ratio = 1.0 / 6;
  s.reduce_s = 0.2;
  s.exposed_reduce_s = 0.01;
  s.p2p_wait_s = 0.05;
  s.tokens = 4096;
  s.checkpoint_stall_s = 0.003;
  s.checkpoint_error = "disk full";
  s.plan_version = 2;
  s.step_s = 0.004;
  s.overlapped_step_s = 0.011;
  EXPECT_EQ(RankStatsFromProto(RankStatsToProto(s)), s);
}

}  // namespace
}  // namespace zpipe::coordinator
