#include "render/plan_export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace zpipe::render {

using core::Action;
using core::ActionKind;
using core::ActionKindName;
using core::IsComm;
using core::PlacementKindName;
using core::Plan;
using core::SimResult;

namespace {

std::string Num(double v) { return absl::StrFormat("%.17g", v); }

std::string NumList(const std::vector<double>& v) {
  return absl::StrCat(
      "[", absl::StrJoin(v, ",", [](std::string* out, double x) { absl::StrAppend(out, Num(x)); }),
      "]");
}

}  // namespace

std::string PlanToJson(const Plan& plan, const SimResult* sim) {
  std::string out =
      absl::StrCat("{\"schedule\":\"", plan.schedule, "\",\"placement\":\"",
                   PlacementKindName(plan.placement.kind()), "\",\"ranks\":", plan.num_ranks(),
                   ",\"chunks\":", plan.placement.chunks_per_rank(),
                   ",\"microbatches\":", plan.num_microbatches);
  if (sim != nullptr) {
    absl::StrAppend(
        &out, ",\"span\":", Num(sim->span), ",\"makespan\":", Num(sim->global_makespan),
        ",\"bubble_rate\":", Num(sim->bubble_rate), ",\"peak_memory\":", NumList(sim->peak_memory),
        ",\"rank_bubble\":", NumList(sim->rank_bubble), ",\"busy\":", NumList(sim->busy),
        ",\"reduce_overlap\":", Num(sim->reduce_overlap));
  }
  absl::StrAppend(&out, ",\"actions\":[");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    absl::StrAppend(&out, r ? "," : "", "[");
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      const Action& a = plan.ranks[r][k];
      absl::StrAppend(&out, k ? "," : "", "{\"kind\":\"", ActionKindName(a.kind), "\"");
      if (a.kind == ActionKind::kReduce) {
        absl::StrAppend(&out, ",\"chunk\":", a.chunk, ",\"bucket\":", a.bucket);
      } else {
        absl::StrAppend(&out, ",\"stage\":", a.stage, ",\"microbatch\":", a.microbatch);
        if (IsComm(a.kind)) absl::StrAppend(&out, ",\"peer\":", a.peer);
      }
      if (sim != nullptr) {
        absl::StrAppend(&out, ",\"start\":", Num(sim->timings[r][k].start),
                        ",\"end\":", Num(sim->timings[r][k].end));
      }
      absl::StrAppend(&out, "}");
    }
    absl::StrAppend(&out, "]");
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

std::string PlanToCsv(const Plan& plan, const SimResult* sim) {
  std::string out = "rank,index,kind,stage,microbatch,peer,chunk,bucket,start,end\n";
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      const Action& a = plan.ranks[r][k];
      const bool reduce = a.kind == ActionKind::kReduce;
      absl::StrAppend(
          &out, r, ",", k, ",", ActionKindName(a.kind), ",", reduce ? "" : absl::StrCat(a.stage),
          ",", reduce ? "" : absl::StrCat(a.microbatch), ",",
          IsComm(a.kind) ? absl::StrCat(a.peer) : "", ",", reduce ? absl::StrCat(a.chunk) : "", ",",
          reduce ? absl::StrCat(a.bucket) : "", ",", sim ? Num(sim->timings[r][k].start) : "", ",",
          sim ? Num(sim->timings[r][k].end) : "", "\n");
    }
  }
  return out;
}

}  // namespace zpipe::render
