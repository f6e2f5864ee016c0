#include "core/recompute.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/simulator.h"
#include "core/status_field.h"
#include "core/validator.h"

namespace zpipe::core {
namespace {

// How far back one R may move, in actions, and the simulation work HoistRecompute may spend
// (actions simulated): a few hundred milliseconds at most; larger plans keep R before B.
constexpr int kMaxHoist = 8;
constexpr double kHoistWork = 2e7;

bool Recomputes(const std::vector<bool>& recompute, int stage) {
  return stage < static_cast<int>(recompute.size()) && recompute[stage];
}

double Tolerance(double x) { return 1e-9 * std::max(1.0, std::abs(x)); }

// What a plan is judged by: span first, then the sum of the ranks' last ends (a rank done sooner
// leaves room for the others' moves). nullopt when it deadlocks or exceeds the memory limit.
struct Score {
  double span = 0;
  double ends = 0;
  bool BetterThan(const Score& o) const {
    if (span < o.span - Tolerance(o.span)) return true;
    if (span > o.span + Tolerance(o.span)) return false;
    return ends < o.ends - Tolerance(o.ends);
  }
};

std::optional<Score> ScoreOf(const Plan& plan, const CostModel& cost, double limit) {
  absl::StatusOr<SimResult> sim = Simulate(plan, cost);
  if (!sim.ok()) return std::nullopt;
  Score score{sim->span, 0};
  for (size_t r = 0; r < sim->timings.size(); ++r) {
    if (sim->peak_memory[r] > limit + Tolerance(limit)) return std::nullopt;
    double last = 0;
    for (const ActionTiming& t : sim->timings[r]) last = std::max(last, t.end);
    score.ends += last;
  }
  return score;
}

struct Candidate {
  Plan plan;
  double span = 0;
  double bubble = 0;
};

absl::StatusOr<Candidate> Measure(Plan plan, const CostModel& cost) {
  absl::StatusOr<SimResult> sim = Simulate(plan, cost);
  if (!sim.ok()) return sim.status();
  return Candidate{std::move(plan), sim->span, sim->bubble_rate};
}

std::string StageList(const std::vector<bool>& recompute) {
  return absl::StrJoin(StageIndices(recompute), ",");
}

// The surrogate for generators that need B and W to free memory (the V family): F holds
// mem_keep, B frees nothing and W what F held. It does not see R's memory at all, so the
// generator's limit must leave room for it (PlanRecomputing).
CostModel FreeingSurrogate(const CostModel& cost, const std::vector<bool>& recompute) {
  CostModel out = RecomputeSurrogate(cost, recompute);
  for (int s = 0; s < out.num_stages(); ++s) {
    if (!Recomputes(recompute, s)) continue;
    StageCost& c = out.stages[s];
    c.mem_b = 0;
    c.mem_w = -c.mem_f;
  }
  return out;
}

// `plan` (the generator's, on a surrogate) with its Rs, when it fits the real costs and `limit`;
// else the validator's reason.
absl::StatusOr<Candidate> WithRecompute(const Plan& plan, const std::vector<bool>& recompute,
                                        const CostModel& cost, double limit) {
  Plan with_r = InsertRecompute(plan, recompute);
  if (absl::Status st = ValidatePlan(with_r, {.cost = &cost, .memory_limit = limit}); !st.ok()) {
    return st;
  }
  return Measure(std::move(with_r), cost);
}

absl::Status DoesNotFit(const std::vector<bool>& recompute, double limit,
                        const absl::Status& why) {
  return absl::FailedPreconditionError(absl::StrCat("recomputing stages ", StageList(recompute),
                                                    " does not fit the memory limit ", limit, ": ",
                                                    why.message()));
}

// PlanRecomputing for a generator that refuses a backward that takes memory (the V family):
// FreeingSurrogate, at generator limits that leave room for one to four recomputed microbatches
// between their R and their W (the surrogate does not see R's memory).
absl::StatusOr<Candidate> PlanRecomputingFreeing(ScheduleKind kind, const ScheduleRequest& request,
                                                 const std::vector<bool>& recompute,
                                                 double headroom) {
  const double limit = *request.memory_limit;
  ScheduleRequest sreq = request;
  sreq.cost = FreeingSurrogate(request.cost, recompute);
  absl::Status last;
  for (int held = 1; held <= 4; ++held) {
    sreq.memory_limit = limit - held * headroom;
    if (*sreq.memory_limit <= 0) break;
    absl::StatusOr<Plan> plan = GenerateSchedule(kind, sreq);
    if (!plan.ok()) {
      last = plan.status();  // a smaller generator limit fails too; said with the real limit
      continue;
    }
    absl::StatusOr<Candidate> fits = WithRecompute(*plan, recompute, request.cost, limit);
    if (fits.ok()) return fits;
    last = fits.status();
    if (headroom <= 0) break;
  }
  return DoesNotFit(recompute, limit, last);
}

// The plan of `kind` that recomputes the stages in `recompute`, within the request's memory limit.
// The surrogate charges R's memory at the backward; when the real order peaks higher (a fused BW,
// or a generator that checks memory only at whole in-flight counts) the plan fails validation, and
// one more try leaves room for one R's memory. A generator that refuses the surrogate's costs
// (the V family) gets PlanRecomputingFreeing instead.
absl::StatusOr<Candidate> PlanRecomputing(ScheduleKind kind, const ScheduleRequest& request,
                                          const std::vector<bool>& recompute) {
  const double limit = *request.memory_limit;
  double headroom = 0;
  for (int s = 0; s < request.cost.num_stages(); ++s) {
    if (!Recomputes(recompute, s)) continue;
    const StageCost& c = request.cost.stages[s];
    headroom = std::max(headroom, c.mem_f - c.mem_keep);
  }
  ScheduleRequest sreq = request;
  sreq.cost = RecomputeSurrogate(request.cost, recompute);
  absl::Status last;
  for (const double generator_limit : {limit, limit - headroom}) {
    if (generator_limit <= 0) break;
    sreq.memory_limit = generator_limit;
    absl::StatusOr<Plan> plan = GenerateSchedule(kind, sreq);
    if (!plan.ok() && absl::StartsWith(ErrorField(plan.status()), "cost")) {
      return PlanRecomputingFreeing(kind, request, recompute, headroom);
    }
    if (!plan.ok()) return plan.status();
    absl::StatusOr<Candidate> fits = WithRecompute(*plan, recompute, request.cost, limit);
    if (fits.ok()) return fits;
    last = fits.status();
    if (headroom <= 0) break;
  }
  return DoesNotFit(recompute, limit, last);
}

}  // namespace

absl::string_view RecomputePolicyName(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::kOff:
      return "off";
    case RecomputePolicy::kAuto:
      return "auto";
    case RecomputePolicy::kAll:
      return "all";
  }
  return "?";
}

absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name) {
  for (RecomputePolicy p : {RecomputePolicy::kOff, RecomputePolicy::kAuto, RecomputePolicy::kAll}) {
    if (RecomputePolicyName(p) == name) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recompute policy '", name, "' (use off, auto or all)"));
}

CostModel RecomputeSurrogate(const CostModel& cost, const std::vector<bool>& recompute) {
  CostModel out = cost;
  for (int s = 0; s < out.num_stages(); ++s) {
    if (!Recomputes(recompute, s)) continue;
    StageCost& c = out.stages[s];
    const StageCost real = c;
    c.mem_f = real.mem_keep;
    c.b = real.b + real.RecomputeTime();
    c.mem_b = (real.mem_f - real.mem_keep) + std::max(real.mem_b, 0.0);
    c.mem_w = real.mem_w + std::min(real.mem_b, 0.0);
  }
  return out;
}

Plan InsertRecompute(const Plan& plan, const std::vector<bool>& recompute) {
  Plan out = plan;
  for (auto& rank : out.ranks) {
    std::vector<Action> actions;
    actions.reserve(rank.size());
    for (const Action& a : rank) {
      const bool backward =
          a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull;
      if (backward && Recomputes(recompute, a.stage)) {
        actions.push_back(Action::R(a.stage, a.microbatch));
      }
      actions.push_back(a);
    }
    rank = std::move(actions);
  }
  return out;
}

std::vector<bool> RecomputedStages(const Plan& plan) {
  std::vector<bool> out(plan.num_stages(), false);
  for (const auto& rank : plan.ranks) {
    for (const Action& a : rank) {
      if (a.kind == ActionKind::kRecompute && a.stage >= 0 && a.stage < plan.num_stages()) {
        out[a.stage] = true;
      }
    }
  }
  return out;
}

std::vector<int> StageIndices(const std::vector<bool>& stages) {
  std::vector<int> out;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages[s]) out.push_back(static_cast<int>(s));
  }
  return out;
}

Plan HoistRecompute(Plan plan, const CostModel& cost, double limit) {
  size_t recomputes = 0;
  for (const auto& rank : plan.ranks) {
    recomputes += std::count_if(rank.begin(), rank.end(), [](const Action& a) {
      return a.kind == ActionKind::kRecompute;
    });
  }
  if (recomputes == 0 || double(recomputes) * kMaxHoist * plan.num_actions() > kHoistWork) {
    return plan;
  }
  std::optional<Score> best = ScoreOf(plan, cost, limit);
  if (!best.has_value()) return plan;
  for (auto& rank : plan.ranks) {
    for (size_t k = 0; k < rank.size(); ++k) {
      if (rank[k].kind != ActionKind::kRecompute) continue;
      const Action r = rank[k];
      size_t pos = k, best_pos = k;
      for (int step = 0; step < kMaxHoist && pos > 0; ++step) {
        if (rank[pos - 1] == Action::F(r.stage, r.microbatch)) break;
        std::swap(rank[pos - 1], rank[pos]);
        --pos;
        std::optional<Score> score = ScoreOf(plan, cost, limit);
        if (score.has_value() && score->BetterThan(*best)) {
          best = score;
          best_pos = pos;
        }
      }
      // Put R at the best position found (the actions it passed keep their order).
      const auto first = rank.begin();
      std::rotate(first + pos, first + pos + 1, first + k + 1);  // R back to k
      if (best_pos < k) std::rotate(first + best_pos, first + k, first + k + 1);
    }
  }
  return plan;
}

absl::StatusOr<RecomputeChoice> ChooseRecompute(ScheduleKind kind, const ScheduleRequest& request,
                                                RecomputePolicy policy) {
  const int stages = request.cost.num_stages();
  const double limit = *request.memory_limit;
  RecomputeChoice out;
  absl::StatusOr<Plan> keep = GenerateSchedule(kind, request);
  std::optional<Candidate> kept;
  if (keep.ok()) {
    absl::StatusOr<Candidate> measured = Measure(*std::move(keep), request.cost);
    if (!measured.ok()) return measured.status();
    kept = *std::move(measured);
    out.keep_span = kept->span;
    out.keep_bubble = kept->bubble;
  }
  // Sets of stages are compared by their greedy plans; the request's search (its budget is per
  // plan) runs once, for the set chosen.
  ScheduleRequest greedy = request;
  greedy.search.budget_seconds = 0;
  std::vector<bool> set(stages, true);
  absl::StatusOr<Candidate> current = PlanRecomputing(kind, greedy, set);
  if (policy == RecomputePolicy::kAll && !current.ok()) return current.status();
  if (policy == RecomputePolicy::kAuto && current.ok()) {
    // Fewer recomputing stages cost less compute: drop each (the last stages hold the fewest
    // microbatches, so they go first) while the span does not grow.
    const bool affordable = double(stages) * current->plan.num_actions() <= kHoistWork / 100;
    for (int s = stages - 1; affordable && s >= 0; --s) {
      std::vector<bool> fewer = set;
      fewer[s] = false;
      if (std::none_of(fewer.begin(), fewer.end(), [](bool b) { return b; })) break;
      absl::StatusOr<Candidate> trial = PlanRecomputing(kind, greedy, fewer);
      if (trial.ok() && trial->span <= current->span + Tolerance(current->span)) {
        set = std::move(fewer);
        current = *std::move(trial);
      }
    }
  }
  if (current.ok() && request.search.budget_seconds > 0) {
    absl::StatusOr<Candidate> searched = PlanRecomputing(kind, request, set);
    if (searched.ok() && searched->span <= current->span) current = *std::move(searched);
  }
  if (current.ok()) {
    absl::StatusOr<Candidate> hoisted =
        Measure(HoistRecompute(current->plan, request.cost, limit), request.cost);
    if (!hoisted.ok()) return hoisted.status();
    current = *std::move(hoisted);
  }
  const bool recompute_wins =
      current.ok() && (policy == RecomputePolicy::kAll || !kept.has_value() ||
                       current->span < kept->span - Tolerance(kept->span));
  if (!recompute_wins) {
    if (!kept.has_value()) return keep.status();
    out.plan = std::move(kept->plan);
    out.stages.assign(stages, false);
    out.span = kept->span;
    out.bubble = kept->bubble;
    return out;
  }
  out.plan = std::move(current->plan);
  out.stages = std::move(set);
  out.span = current->span;
  out.bubble = current->bubble;
  return out;
}

}  // namespace zpipe::core
