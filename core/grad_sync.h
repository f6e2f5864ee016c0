// Grad-sync planning: where each gradient bucket's all-reduce can be launched.
//
// Each rank's chunk (one model stage) packs its parameters into buckets. A bucket receives
// gradient contributions during B (parameters whose gradient comes with the input gradient:
// LayerNorm, embeddings), during W (split linear weights), or both; BW contributes both. Per
// iteration it receives `contributions_per_microbatch * m` of them. PlanGradSync places
// `REDUCE chunkC bucketK` right after the action holding the bucket's last contribution on that
// rank, so the reduce can overlap the compute still to come. Reduce launch order is derived from
// the plan alone, so it is identical on every data-parallel replica.
#ifndef ZPIPE_CORE_GRAD_SYNC_H_
#define ZPIPE_CORE_GRAD_SYNC_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"

namespace zpipe::core {

struct BucketSpec {
  bool grads_in_b = false;               // some parameter's gradient accumulates during B (or BW)
  bool grads_in_w = true;                // some parameter's gradient accumulates during W (or BW)
  int contributions_per_microbatch = 1;  // accumulations per microbatch into this bucket
};

// buckets[s] = the buckets of stage s, in launch-preference order (reverse layer order).
struct GradSyncLayout {
  std::vector<std::vector<BucketSpec>> buckets;

  // `count` W-only buckets for every one of `num_stages` stages.
  static GradSyncLayout Uniform(int num_stages, int count);
};

struct BucketPlan {
  int rank = 0;
  int chunk = 0;
  int bucket = 0;
  int stage = 0;
  int expected_contributions = 0;   // per iteration
  int last_contribution_index = 0;  // index in the rank's action list (before REDUCE insertion)
};

struct GradSyncPlan {
  Plan plan;                        // input plan with REDUCE actions inserted
  std::vector<BucketPlan> buckets;  // one entry per (rank, chunk, bucket)
};

// `overlap` false places every REDUCE after the rank's last action instead (the baseline).
absl::StatusOr<GradSyncPlan> PlanGradSync(const Plan& plan, const GradSyncLayout& layout,
                                          bool overlap = true);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_GRAD_SYNC_H_
