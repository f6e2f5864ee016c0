#include "render/plan_export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "render/internal/json.h"

namespace zpipe::render {

using core::Action;
using core::ActionKind;
using core::ActionKindName;
using core::ActionTiming;
using core::IsComm;
using core::PlacementKindName;
using core::Plan;
using core::SimResult;

namespace {

using internal::Json;
using internal::JsonNumber;

std::string Num(double v) { return absl::StrFormat("%.17g", v); }

// One action: its kind and what names it (chunk and bucket for a reduce, else stage and
// microbatch, and the peer of a send or receive), then its simulated times.
Json ActionJson(const Action& a, const ActionTiming* timing) {
  Json out = {{"kind", std::string(ActionKindName(a.kind))}};
  if (a.kind == ActionKind::kReduce) {
    out["chunk"] = a.chunk;
    out["bucket"] = a.bucket;
  } else {
    out["stage"] = a.stage;
    out["microbatch"] = a.microbatch;
    if (IsComm(a.kind)) out["peer"] = a.peer;
  }
  if (timing != nullptr) {
    out["start"] = JsonNumber(timing->start);
    out["end"] = JsonNumber(timing->end);
  }
  return out;
}

}  // namespace

std::string PlanToJson(const Plan& plan, const SimResult* sim) {
  Json out = {{"schedule", plan.schedule},
              {"placement", std::string(PlacementKindName(plan.placement.kind()))},
              {"ranks", plan.num_ranks()},
              {"chunks", plan.placement.chunks_per_rank()},
              {"microbatches", plan.num_microbatches}};
  if (sim != nullptr) {
    out["span"] = JsonNumber(sim->span);
    out["makespan"] = JsonNumber(sim->global_makespan);
    out["bubble_rate"] = JsonNumber(sim->bubble_rate);
    out["peak_memory"] = internal::JsonNumbers(sim->peak_memory);
    out["rank_bubble"] = internal::JsonNumbers(sim->rank_bubble);
    out["busy"] = internal::JsonNumbers(sim->busy);
    out["reduce_overlap"] = JsonNumber(sim->reduce_overlap);
  }
  Json ranks = Json::array();
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    Json actions = Json::array();
    for (size_t k = 0; k < plan.ranks[r].size(); ++k) {
      actions.push_back(ActionJson(plan.ranks[r][k], sim ? &sim->timings[r][k] : nullptr));
    }
    ranks.push_back(std::move(actions));
  }
  out["actions"] = std::move(ranks);
  return internal::DumpLine(out);
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
