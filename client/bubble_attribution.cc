#include "client/bubble_attribution.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cost_model.h"
#include "core/simulator.h"

namespace zpipe::cli {
namespace {

using core::Action;
using core::ActionKind;
using core::ActionTiming;
using Key = std::tuple<ActionKind, int, int>;  // kind, stage, microbatch

// A rank's compute actions of one iteration by (kind, stage, microbatch).
using RankTimes = std::map<Key, ActionTiming>;

absl::StatusOr<RankTimes> ComputeTimes(const v1::RankTrace& rank) {
  RankTimes times;
  for (const v1::TracedAction& a : rank.actions()) {
    absl::StatusOr<ActionKind> kind = core::ParseActionKind(a.kind());
    if (!kind.ok()) return kind.status();
    if (!core::IsCompute(*kind)) continue;
    times[{*kind, a.stage(), a.microbatch()}] = {a.start(), a.end()};
  }
  return times;
}

// Reads `rank`'s compute times into (*times)[its pipeline rank]; `what` names the timeline.
absl::Status StoreRank(const v1::RankTrace& rank, absl::string_view what,
                       std::vector<RankTimes>* times) {
  const int p = static_cast<int>(times->size());
  if (rank.pipeline_rank() < 0 || rank.pipeline_rank() >= p) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " rank ", rank.pipeline_rank(), " is outside p = ", p));
  }
  absl::StatusOr<RankTimes> t = ComputeTimes(rank);
  if (!t.ok()) return t.status();
  (*times)[rank.pipeline_rank()] = *std::move(t);
  return absl::OkStatus();
}

// 1 - sum busy / (p * longest rank span), spans from first compute start to last compute end.
double Bubble(const std::vector<std::vector<ActionTiming>>& ranks) {
  double busy = 0, span = 0;
  for (const auto& rank : ranks) {
    double first = std::numeric_limits<double>::infinity(), last = -first;
    for (const ActionTiming& t : rank) {
      busy += t.end - t.start;
      first = std::min(first, t.start);
      last = std::max(last, t.end);
    }
    if (last > first) span = std::max(span, last - first);
  }
  return span > 0 ? 1 - busy / (ranks.size() * span) : 0;
}

// The compute actions of `plan.ranks[r]` in plan order, timed from `times[r]`.
absl::StatusOr<std::vector<std::vector<ActionTiming>>> InPlanOrder(
    const core::Plan& plan, const std::vector<RankTimes>& times, absl::string_view what) {
  std::vector<std::vector<ActionTiming>> out(plan.num_ranks());
  for (int r = 0; r < plan.num_ranks(); ++r) {
    for (const Action& a : plan.ranks[r]) {
      if (!core::IsCompute(a.kind)) continue;
      const auto found = times[r].find({a.kind, a.stage, a.microbatch});
      if (found == times[r].end()) {
        return absl::FailedPreconditionError(absl::StrCat("the ", what, " timeline of rank ", r,
                                                          " lacks ", core::ActionToString(a)));
      }
      out[r].push_back(found->second);
    }
  }
  return out;
}

// The hand-over time of a simulated timeline: the shortest gap between a compute action's end and
// the start of its consumer on another rank (F to the next stage's F, B to the previous stage's
// B). At least one consumer waits for its input (the first F downstream), so the minimum is
// T_comm. 0 for a single rank.
double HandOverTime(const core::Plan& plan, const std::vector<RankTimes>& times) {
  std::map<Key, double> end;
  for (const RankTimes& rank : times) {
    for (const auto& [key, t] : rank) {
      const ActionKind kind = std::get<0>(key) == ActionKind::kBackwardFull
                                  ? ActionKind::kBackwardInput
                                  : std::get<0>(key);
      end[{kind, std::get<1>(key), std::get<2>(key)}] = t.end;
    }
  }
  double comm = std::numeric_limits<double>::infinity();
  for (const RankTimes& rank : times) {
    for (const auto& [key, t] : rank) {
      const auto [kind, stage, mb] = key;
      const std::optional<Action> producer =
          core::NeighbourInput({kind, stage, mb}, plan.num_stages());
      if (!producer || plan.placement.RankOf(producer->stage) == plan.placement.RankOf(stage)) {
        continue;
      }
      const auto found = end.find({producer->kind, producer->stage, producer->microbatch});
      if (found != end.end()) comm = std::min(comm, std::max(0.0, t.start - found->second));
    }
  }
  return std::isfinite(comm) ? comm : 0;
}

}  // namespace

absl::StatusOr<BubbleAttribution> AttributeBubble(const core::Plan& plan,
                                                  const v1::GetTraceResponse& trace) {
  const int p = plan.num_ranks();
  if (trace.predicted_size() != p) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the trace's predicted timeline has ", trace.predicted_size(), " ranks, the plan ", p));
  }
  if (trace.ranks_size() == 0 || trace.ranks_size() % p != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the trace has ", trace.ranks_size(), " executed ranks, not a multiple of p = ", p));
  }
  std::vector<RankTimes> predicted_times(p);
  for (const v1::RankTrace& rank : trace.predicted()) {
    if (absl::Status st = StoreRank(rank, "predicted", &predicted_times); !st.ok()) return st;
  }
  absl::StatusOr<std::vector<std::vector<ActionTiming>>> predicted =
      InPlanOrder(plan, predicted_times, "predicted");
  if (!predicted.ok()) return predicted.status();

  BubbleAttribution out;
  out.predicted = Bubble(*predicted);
  out.comm_s = HandOverTime(plan, predicted_times);
  const core::CostModel cost = core::CostModel::Uniform(plan.num_stages(), {}, out.comm_s);
  const int replicas = trace.ranks_size() / p;
  for (int dr = 0; dr < replicas; ++dr) {
    std::vector<RankTimes> times(p);
    for (const v1::RankTrace& rank : trace.ranks()) {
      if (rank.data_rank() != dr) continue;
      if (absl::Status st = StoreRank(rank, "executed", &times); !st.ok()) return st;
    }
    absl::StatusOr<std::vector<std::vector<ActionTiming>>> executed =
        InPlanOrder(plan, times, absl::StrCat("executed (replica ", dr, ")"));
    if (!executed.ok()) return executed.status();
    // Each action of the plan as long as it ran; non-compute entries are ignored.
    std::vector<std::vector<double>> durations(p);
    for (int r = 0; r < p; ++r) {
      size_t next = 0;
      for (const Action& a : plan.ranks[r]) {
        double d = 0;
        if (core::IsCompute(a.kind)) {
          const ActionTiming& t = (*executed)[r][next++];
          d = std::max(0.0, t.end - t.start);
        }
        durations[r].push_back(d);
      }
    }
    core::SimOptions options;
    options.action_durations = &durations;
    absl::StatusOr<core::SimResult> replay = core::Simulate(plan, cost, options);
    if (!replay.ok()) return replay.status();
    std::vector<std::vector<ActionTiming>> replayed(p);
    for (int r = 0; r < p; ++r) {
      for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
        if (core::IsCompute(plan.ranks[r][k].kind)) replayed[r].push_back(replay->timings[r][k]);
      }
    }
    out.replayed += Bubble(replayed) / replicas;
    out.measured += Bubble(*executed) / replicas;
  }
  return out;
}

}  // namespace zpipe::cli
