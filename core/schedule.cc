#include "core/schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/internal/generators.h"
#include "core/status_field.h"

namespace zpipe::core {
namespace {

struct ScheduleInfo {
  ScheduleKind kind;
  absl::string_view name;
  bool splits_backward;
  bool searches;  // SearchOptions applies
};

constexpr ScheduleInfo kSchedules[] = {
    {ScheduleKind::kGpipe, "gpipe", false, false},
    {ScheduleKind::k1F1B, "1f1b", false, false},
    {ScheduleKind::kInterleaved1F1B, "interleaved", false, false},
    {ScheduleKind::kZbH1, "zb-h1", true, false},
    {ScheduleKind::kZbH2, "zb-h2", true, false},
    {ScheduleKind::kZb1p, "zb-1p", true, true},
    {ScheduleKind::kZb2p, "zb-2p", true, true},
    {ScheduleKind::kZbAuto, "zb-auto", true, true},
    {ScheduleKind::kZbV, "zb-v", true, true},
    {ScheduleKind::kVHalf, "v-half", true, true},
    {ScheduleKind::kVMin, "v-min", true, true},
    {ScheduleKind::kDualPipeV, "dualpipe-v", true, false},
};

const ScheduleInfo& Info(ScheduleKind kind) {
  for (const auto& info : kSchedules) {
    if (info.kind == kind) return info;
  }
  return kSchedules[0];
}

double MaxMemF(const CostModel& cost) {
  double m = 0;
  for (const auto& c : cost.stages) m = std::max(m, c.mem_f);
  return m;
}

}  // namespace

absl::string_view ScheduleName(ScheduleKind kind) { return Info(kind).name; }

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  for (const auto& info : kSchedules) {
    if (info.name == name) return info.kind;
  }
  if (name == "interleaved-1f1b" || name == "1f1b-interleaved") {
    return ScheduleKind::kInterleaved1F1B;
  }
  if (name == "zbv") return ScheduleKind::kZbV;
  if (name == "dualpipev") return ScheduleKind::kDualPipeV;
  std::vector<absl::string_view> names;
  for (const auto& info : kSchedules) names.push_back(info.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown schedule '", name, "' (expected one of ",
                                                 absl::StrJoin(names, ", "), ")"));
}

const std::vector<ScheduleKind>& AllScheduleKinds() {
  static const auto* kinds = [] {
    auto* v = new std::vector<ScheduleKind>;
    for (const auto& info : kSchedules) v->push_back(info.kind);
    return v;
  }();
  return *kinds;
}

bool SplitsBackward(ScheduleKind kind) { return Info(kind).splits_backward; }

bool HasSearch(ScheduleKind kind) { return Info(kind).searches; }

Placement PlacementFor(ScheduleKind kind, int pipeline, int chunks) {
  switch (kind) {
    case ScheduleKind::kInterleaved1F1B:
      return Placement::Interleaved(pipeline, chunks >= 2 ? chunks : 2);
    case ScheduleKind::kZbV:
    case ScheduleKind::kVHalf:
    case ScheduleKind::kVMin:
    case ScheduleKind::kDualPipeV:
      return Placement::VShape(pipeline);
    default:
      return Placement::Linear(pipeline);
  }
}

double DefaultMemoryLimit(ScheduleKind kind, int p, int m, const CostModel& cost) {
  const double mf = MaxMemF(cost);
  switch (kind) {
    case ScheduleKind::kGpipe:
      return m * mf;
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1:
    case ScheduleKind::kZb1p:
    case ScheduleKind::kZbAuto:
      return p * mf;
    case ScheduleKind::kInterleaved1F1B: {
      // Megatron's interleaved schedule keeps up to (v-1)*p + 2*(p-1) + 1 chunk activations.
      const int v = cost.num_stages() / std::max(p, 1);
      return ((v - 1) * p + 2 * (p - 1) + 1) * mf;
    }
    case ScheduleKind::kZbH2:
      return (2 * p - 1) * mf;
    case ScheduleKind::kZb2p:
      return 2 * p * mf;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
      return 2 * p * mf;  // chunk-sized stages: the same as 1F1B's p stage activations
    case ScheduleKind::kVHalf:
      return (p + 2) * mf;  // about half of 1F1B's 2p chunk activations
    case ScheduleKind::kVMin:
      return (std::ceil(2.0 * p / 3.0) + 2) * mf;  // about a third
  }
  return p * mf;
}

absl::StatusOr<Plan> GenerateSchedule(ScheduleKind kind, const ScheduleRequest& req) {
  if (req.pipeline < 1) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat("pipeline must be >= 1, got ", req.pipeline)),
        "pipeline");
  }
  if (req.microbatches < 1) {
    return WithField(absl::InvalidArgumentError(
                         absl::StrCat("microbatches must be >= 1, got ", req.microbatches)),
                     "microbatches");
  }
  if (kind == ScheduleKind::kInterleaved1F1B && req.chunks != 0 && req.chunks < 2) {
    return WithField(absl::InvalidArgumentError("interleaved needs chunks >= 2"), "chunks");
  }
  const Placement placement = PlacementFor(kind, req.pipeline, req.chunks);
  if (absl::Status s = req.cost.Check(placement.num_stages()); !s.ok()) {
    return WithField(
        absl::InvalidArgumentError(absl::StrCat(ScheduleName(kind), ": ", s.message())), "cost");
  }
  const double limit =
      req.memory_limit.value_or(DefaultMemoryLimit(kind, req.pipeline, req.microbatches, req.cost));
  switch (kind) {
    case ScheduleKind::kGpipe:
      return internal::GenerateGpipe(req, limit);
    case ScheduleKind::k1F1B:
      return internal::Generate1F1B(req, limit);
    case ScheduleKind::kInterleaved1F1B:
      return internal::GenerateInterleaved(req, limit);
    case ScheduleKind::kZbH1:
      return internal::GenerateZbH1(req, limit);
    case ScheduleKind::kZbH2:
      return internal::GenerateZbH2(req, limit);
    case ScheduleKind::kZb1p:
    case ScheduleKind::kZb2p:
    case ScheduleKind::kZbAuto:
      return internal::GenerateZbAuto(req, limit, ScheduleName(kind));
    case ScheduleKind::kZbV:
      return internal::GenerateZbV(req, limit);
    case ScheduleKind::kVHalf:
      return internal::GenerateVHalf(req, limit);
    case ScheduleKind::kVMin:
      return internal::GenerateVMin(req, limit);
    case ScheduleKind::kDualPipeV:
      return internal::GenerateDualPipeV(req, limit);
  }
  return absl::InternalError("unreachable");
}

}  // namespace zpipe::core
