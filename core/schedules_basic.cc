// GPipe, 1F1B and interleaved 1F1B: the classic schedules with a fused backward (BW).
#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/internal/generators.h"
#include "core/status_field.h"

namespace zpipe::core::internal {
namespace {

// Activation memory a rank holds with `in_flight` forwards whose backward has not run yet.
double PeakFor(const CostModel& cost, const Placement& placement, int rank, int in_flight) {
  double mf = 0;
  for (int c = 0; c < placement.chunks_per_rank(); ++c) {
    mf = std::max(mf, cost.stages[placement.StageOf(rank, c)].mem_f);
  }
  return in_flight * mf;
}

absl::Status CheckMemory(absl::string_view name, const ScheduleRequest& req,
                         const Placement& placement, double limit,
                         const std::vector<int>& in_flight_per_rank) {
  for (int r = 0; r < placement.num_ranks(); ++r) {
    const double need = PeakFor(req.cost, placement, r, in_flight_per_rank[r]);
    if (need > limit * (1 + 1e-9) + 1e-9) {
      return WithField(absl::FailedPreconditionError(absl::StrCat(
                           name, ": rank ", r, " needs ", in_flight_per_rank[r],
                           " microbatch activations (", need, ") but the memory limit is ", limit)),
                       "memory_limit");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> GenerateGpipe(const ScheduleRequest& req, double memory_limit) {
  const int p = req.pipeline, m = req.microbatches;
  Plan plan = EmptyPlan("gpipe", Placement::Linear(p), m);
  if (absl::Status st =
          CheckMemory("gpipe", req, plan.placement, memory_limit, std::vector<int>(p, m));
      !st.ok()) {
    return st;
  }
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) plan.ranks[r].push_back(Action::F(r, i));
    for (int i = 0; i < m; ++i) plan.ranks[r].push_back(Action::BW(r, i));
  }
  return plan;
}

absl::StatusOr<Plan> Generate1F1B(const ScheduleRequest& req, double memory_limit) {
  const int p = req.pipeline, m = req.microbatches;
  Plan plan = EmptyPlan("1f1b", Placement::Linear(p), m);
  std::vector<int> in_flight(p);
  for (int r = 0; r < p; ++r) in_flight[r] = std::min(m, p - r);
  if (absl::Status st = CheckMemory("1f1b", req, plan.placement, memory_limit, in_flight);
      !st.ok()) {
    return st;
  }
  for (int r = 0; r < p; ++r) {
    auto& out = plan.ranks[r];
    const int warmup = std::min(m, p - 1 - r);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) out.push_back(Action::F(r, next_f));
    while (next_f < m) {
      out.push_back(Action::F(r, next_f++));
      out.push_back(Action::BW(r, next_b++));
    }
    while (next_b < m) out.push_back(Action::BW(r, next_b++));
  }
  return plan;
}

// Megatron-style interleaved 1F1B: microbatches advance through the v local chunks in groups of
// p; rank r warms up with (p - r - 1) * 2 + (v - 1) * p forward chunks, then alternates one
// forward chunk and one backward chunk, then drains.
absl::StatusOr<Plan> GenerateInterleaved(const ScheduleRequest& req, double memory_limit) {
  const int p = req.pipeline, m = req.microbatches;
  const int v = req.chunks >= 2 ? req.chunks : 2;
  if (m % p != 0) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat("interleaved: microbatches (", m,
                                                ") must be a multiple of pipeline (", p, ")")),
        "microbatches");
  }
  const Placement placement = Placement::Interleaved(p, v);
  Plan plan = EmptyPlan("interleaved", placement, m);
  const int total = m * v;  // chunk-microbatch units per rank
  // The k-th forward unit of a rank: chunk (k / p) % v, microbatch (k / (p*v)) * p + k % p.
  auto forward_unit = [&](int k) {
    const int group = k / (p * v);
    const int in_group = k % (p * v);
    return std::pair<int, int>{in_group / p, group * p + in_group % p};
  };
  // Backward units run the chunks in reverse.
  auto backward_unit = [&](int k) {
    auto [chunk, mb] = forward_unit(k);
    return std::pair<int, int>{v - 1 - chunk, mb};
  };
  std::vector<int> in_flight(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(total, (p - r - 1) * 2 + (v - 1) * p);
    in_flight[r] = std::min(total, warmup + 1);
  }
  if (absl::Status st = CheckMemory("interleaved", req, placement, memory_limit, in_flight);
      !st.ok()) {
    return st;
  }
  for (int r = 0; r < p; ++r) {
    auto& out = plan.ranks[r];
    const int warmup = std::min(total, (p - r - 1) * 2 + (v - 1) * p);
    int f = 0, b = 0;
    for (; f < warmup; ++f) {
      auto [chunk, mb] = forward_unit(f);
      out.push_back(Action::F(placement.StageOf(r, chunk), mb));
    }
    while (f < total) {
      auto [fc, fm] = forward_unit(f++);
      out.push_back(Action::F(placement.StageOf(r, fc), fm));
      auto [bc, bm] = backward_unit(b++);
      out.push_back(Action::BW(placement.StageOf(r, bc), bm));
    }
    while (b < total) {
      auto [bc, bm] = backward_unit(b++);
      out.push_back(Action::BW(placement.StageOf(r, bc), bm));
    }
  }
  return plan;
}

}  // namespace zpipe::core::internal
