#include "core/plan.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/plan_limits.h"

namespace zpipe::core {
namespace {

struct KindName {
  ActionKind kind;
  absl::string_view name;
};

constexpr KindName kKindNames[] = {
    {ActionKind::kForward, "F"},          {ActionKind::kBackwardInput, "B"},
    {ActionKind::kBackwardWeight, "W"},   {ActionKind::kBackwardFull, "BW"},
    {ActionKind::kSendAct, "SEND_ACT"},   {ActionKind::kRecvAct, "RECV_ACT"},
    {ActionKind::kSendGrad, "SEND_GRAD"}, {ActionKind::kRecvGrad, "RECV_GRAD"},
    {ActionKind::kReduce, "REDUCE"},      {ActionKind::kRecompute, "R"},
};

// Parses "<prefix><non-negative int>", e.g. "s12" with prefix "s".
absl::StatusOr<int> ParsePrefixed(absl::string_view token, absl::string_view prefix) {
  int value = 0;
  if (!absl::ConsumePrefix(&token, prefix) || !absl::SimpleAtoi(token, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", prefix, "<number>, got '", token, "'"));
  }
  return value;
}

}  // namespace

absl::string_view ActionKindName(ActionKind kind) {
  for (const auto& kn : kKindNames) {
    if (kn.kind == kind) return kn.name;
  }
  return "?";
}

absl::StatusOr<ActionKind> ParseActionKind(absl::string_view name) {
  for (const auto& kn : kKindNames) {
    if (kn.name == name) return kn.kind;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown action kind '", name, "'"));
}

bool IsCompute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight || kind == ActionKind::kBackwardFull ||
         kind == ActionKind::kRecompute;
}
bool IsSend(ActionKind kind) {
  return kind == ActionKind::kSendAct || kind == ActionKind::kSendGrad;
}
bool IsRecv(ActionKind kind) {
  return kind == ActionKind::kRecvAct || kind == ActionKind::kRecvGrad;
}

std::optional<Action> NeighbourInput(const Action& a, int num_stages) {
  if (a.kind == ActionKind::kForward && a.stage > 0) return Action::F(a.stage - 1, a.microbatch);
  if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackwardFull) &&
      a.stage + 1 < num_stages) {
    return Action::B(a.stage + 1, a.microbatch);
  }
  return std::nullopt;
}

std::string ActionToString(const Action& a) {
  if (a.kind == ActionKind::kReduce) {
    return absl::StrCat("REDUCE chunk", a.chunk, " bucket", a.bucket);
  }
  std::string out = absl::StrCat(ActionKindName(a.kind), " s", a.stage, " mb", a.microbatch);
  if (IsSend(a.kind)) absl::StrAppend(&out, " -> r", a.peer);
  if (IsRecv(a.kind)) absl::StrAppend(&out, " <- r", a.peer);
  return out;
}

absl::StatusOr<Action> ParseAction(absl::string_view line) {
  std::vector<absl::string_view> tok =
      absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad action '", line, "': ", why));
  };
  if (tok.empty()) return fail("empty");
  auto kind = ParseActionKind(tok[0]);
  if (!kind.ok()) return fail(kind.status().message());
  Action a;
  a.kind = *kind;
  if (a.kind == ActionKind::kReduce) {
    if (tok.size() != 3) return fail("expected 'REDUCE chunk<C> bucket<K>'");
    auto chunk = ParsePrefixed(tok[1], "chunk");
    auto bucket = ParsePrefixed(tok[2], "bucket");
    if (!chunk.ok()) return fail(chunk.status().message());
    if (!bucket.ok()) return fail(bucket.status().message());
    a.chunk = *chunk;
    a.bucket = *bucket;
    return a;
  }
  const bool comm = IsComm(a.kind);
  if (tok.size() != (comm ? 5u : 3u)) {
    return fail(comm ? "expected '<KIND> s<S> mb<M> ->|<- r<R>'" : "expected '<KIND> s<S> mb<M>'");
  }
  auto stage = ParsePrefixed(tok[1], "s");
  auto mb = ParsePrefixed(tok[2], "mb");
  if (!stage.ok()) return fail(stage.status().message());
  if (!mb.ok()) return fail(mb.status().message());
  a.stage = *stage;
  a.microbatch = *mb;
  if (comm) {
    absl::string_view arrow = IsSend(a.kind) ? "->" : "<-";
    if (tok[3] != arrow) return fail(absl::StrCat("expected '", arrow, "'"));
    auto peer = ParsePrefixed(tok[4], "r");
    if (!peer.ok()) return fail(peer.status().message());
    a.peer = *peer;
  }
  return a;
}

size_t Plan::num_actions() const {
  size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

bool Plan::IsLowered() const {
  for (const auto& r : ranks) {
    for (const auto& a : r) {
      if (IsComm(a.kind)) return true;
    }
  }
  return false;
}

Plan EmptyPlan(std::string schedule, const Placement& placement, int microbatches) {
  Plan plan;
  plan.schedule = std::move(schedule);
  plan.placement = placement;
  plan.num_microbatches = microbatches;
  plan.ranks.resize(placement.num_ranks());
  return plan;
}

std::string PlanToText(const Plan& plan) {
  std::string out = "zpipe-plan v1\n";
  absl::StrAppend(&out, "schedule ", plan.schedule.empty() ? "-" : plan.schedule, "\n");
  absl::StrAppend(&out, "placement ", PlacementKindName(plan.placement.kind()), " ranks ",
                  plan.num_ranks(), " chunks ", plan.placement.chunks_per_rank(), " microbatches ",
                  plan.num_microbatches, "\n");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    absl::StrAppend(&out, "rank ", r, "\n");
    for (const Action& a : plan.ranks[r]) absl::StrAppend(&out, ActionToString(a), "\n");
  }
  return out;
}

absl::StatusOr<Plan> ParsePlanText(absl::string_view text) {
  Plan plan;
  int line_no = 0;
  int current_rank = -1;
  bool seen_magic = false, seen_placement = false;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("plan text line ", line_no, ": ", why));
    };
    std::vector<absl::string_view> tok = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!seen_magic) {
      if (line != "zpipe-plan v1") return fail("expected header 'zpipe-plan v1'");
      seen_magic = true;
      continue;
    }
    if (tok[0] == "schedule") {
      if (tok.size() != 2) return fail("expected 'schedule NAME'");
      plan.schedule = tok[1] == "-" ? "" : std::string(tok[1]);
      continue;
    }
    if (tok[0] == "placement") {
      // One placement per plan: a second one would resize the ranks under an open 'rank R'.
      if (seen_placement) return fail("a second 'placement' line (a plan has one)");
      int p = 0, v = 0, m = 0;
      if (tok.size() != 8 || tok[2] != "ranks" || tok[4] != "chunks" || tok[6] != "microbatches" ||
          !absl::SimpleAtoi(tok[3], &p) || !absl::SimpleAtoi(tok[5], &v) ||
          !absl::SimpleAtoi(tok[7], &m) || m < 0) {
        return fail("expected 'placement KIND ranks P chunks V microbatches M'");
      }
      // The plan bounds (core/plan_limits.h), before anything is sized by them: without them
      // "ranks 2000000000" allocated 48 GB and "chunks 2000000000" overflowed p x v.
      if (p > kMaxPipeline || v > kMaxChunks || m > kMaxMicrobatches ||
          int64_t{p} * v * m > kMaxStageMicrobatches) {
        return fail(absl::StrCat("ranks ", p, " chunks ", v, " microbatches ", m,
                                 " exceed the plan bounds (ranks <= ", kMaxPipeline,
                                 ", chunks <= ", kMaxChunks, ", microbatches <= ", kMaxMicrobatches,
                                 ", ranks x chunks x microbatches <= ", kMaxStageMicrobatches,
                                 ")"));
      }
      auto kind = ParsePlacementKind(tok[1]);
      if (!kind.ok()) return fail(kind.status().message());
      auto placement = Placement::Make(*kind, p, v);
      if (!placement.ok()) return fail(placement.status().message());
      plan.placement = *placement;
      plan.num_microbatches = m;
      plan.ranks.assign(p, {});
      seen_placement = true;
      continue;
    }
    if (!seen_placement) return fail("'placement' line must come before ranks and actions");
    if (tok[0] == "rank") {
      int r = -1;
      if (tok.size() != 2 || !absl::SimpleAtoi(tok[1], &r) || r < 0 || r >= plan.num_ranks()) {
        return fail(absl::StrCat("expected 'rank R' with R in [0, ", plan.num_ranks(), ")"));
      }
      current_rank = r;
      continue;
    }
    if (current_rank < 0) return fail("action before any 'rank R' line");
    auto action = ParseAction(line);
    if (!action.ok()) return fail(action.status().message());
    plan.ranks[current_rank].push_back(*action);
  }
  if (!seen_placement) return absl::InvalidArgumentError("plan text has no 'placement' line");
  return plan;
}

}  // namespace zpipe::core
