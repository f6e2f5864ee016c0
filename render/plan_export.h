// JSON and CSV exports of a plan, optionally with simulated timings and statistics.
#ifndef ZPIPE_RENDER_PLAN_EXPORT_H_
#define ZPIPE_RENDER_PLAN_EXPORT_H_

#include <string>

#include "core/plan.h"
#include "core/simulator.h"

namespace zpipe::render {

// {"schedule":..., "placement":..., "ranks":P, "chunks":V, "microbatches":M,
//  "span":..., "makespan":..., "bubble_rate":..., "peak_memory":[...], "rank_bubble":[...],
//  "busy":[...], "reduce_overlap":...,
//  "actions":[[{"kind":"F","stage":0,"microbatch":0,"start":..,"end":..}, ...], ...]}
// Statistics and times are present only when `sim` is given. Written with nlohmann-json on one
// line: a number is an integer when it is one, else the shortest text that reads back as the same
// double (NaN, which JSON lacks, as null). "span" is the span of docs/design.md (what the bubble
// rates are relative to); "makespan" is the first start to the last end over all
// ranks (SimResult::global_makespan), so every action's "end" is within "makespan" of the first
// "start". Before the span was added, "makespan" held the span.
std::string PlanToJson(const core::Plan& plan, const core::SimResult* sim = nullptr);

// Header "rank,index,kind,stage,microbatch,peer,chunk,bucket,start,end"; start/end empty
// without `sim`.
std::string PlanToCsv(const core::Plan& plan, const core::SimResult* sim = nullptr);

}  // namespace zpipe::render

#endif  // ZPIPE_RENDER_PLAN_EXPORT_H_
