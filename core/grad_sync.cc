#include "core/grad_sync.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::core {

GradSyncLayout GradSyncLayout::Uniform(int num_stages, int count) {
  GradSyncLayout layout;
  layout.buckets.assign(num_stages, std::vector<BucketSpec>(count, BucketSpec{}));
  return layout;
}

namespace {

bool Contributes(const BucketSpec& bucket, ActionKind kind) {
  switch (kind) {
    case ActionKind::kBackwardInput:
      return bucket.grads_in_b;
    case ActionKind::kBackwardWeight:
      return bucket.grads_in_w;
    case ActionKind::kBackwardFull:
      return bucket.grads_in_b || bucket.grads_in_w;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<GradSyncPlan> PlanGradSync(const Plan& plan, const GradSyncLayout& layout,
                                          bool overlap) {
  const Placement& pl = plan.placement;
  if (static_cast<int>(layout.buckets.size()) != pl.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("grad sync: layout has ", layout.buckets.size(),
                                                   " stages, the plan ", pl.num_stages()));
  }
  for (const auto& rank : plan.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kReduce) {
        return absl::InvalidArgumentError("grad sync: the plan already has REDUCE actions");
      }
    }
  }
  GradSyncPlan out;
  out.plan = plan;
  for (int r = 0; r < pl.num_ranks(); ++r) {
    const auto& actions = plan.ranks[r];
    // insert_after[k] = reduces to place right after action k.
    std::vector<std::vector<Action>> insert_after(actions.size());
    for (int c = 0; c < pl.chunks_per_rank(); ++c) {
      const int stage = pl.StageOf(r, c);
      const auto& buckets = layout.buckets[stage];
      for (int k = 0; k < static_cast<int>(buckets.size()); ++k) {
        const BucketSpec& spec = buckets[k];
        if (!spec.grads_in_b && !spec.grads_in_w) {
          return absl::InvalidArgumentError(
              absl::StrCat("grad sync: stage ", stage, " bucket ", k, " receives no gradient"));
        }
        int last = -1, count = 0;
        for (int idx = 0; idx < static_cast<int>(actions.size()); ++idx) {
          const Action& a = actions[idx];
          if (a.stage == stage && IsCompute(a.kind) && Contributes(spec, a.kind)) {
            last = idx;
            ++count;
          }
        }
        if (last < 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "grad sync: no action of rank ", r, " contributes to stage ", stage, " bucket ", k));
        }
        BucketPlan bp;
        bp.rank = r;
        bp.chunk = c;
        bp.bucket = k;
        bp.stage = stage;
        bp.expected_contributions = count * spec.contributions_per_microbatch;
        bp.last_contribution_index = last;
        out.buckets.push_back(bp);
        const int at = overlap ? last : static_cast<int>(actions.size()) - 1;
        insert_after[at].push_back(Action::Reduce(c, k));
      }
    }
    auto& dst = out.plan.ranks[r];
    dst.clear();
    for (size_t idx = 0; idx < actions.size(); ++idx) {
      dst.push_back(actions[idx]);
      // Several buckets completing at one action launch in layout order (reverse layer order).
      for (const Action& reduce : insert_after[idx]) dst.push_back(reduce);
    }
  }
  return out;
}

}  // namespace zpipe::core
