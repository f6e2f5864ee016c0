#include "client/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/number_format.h"
#include "core/plan_limits.h"
#include "core/planning.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/status_field.h"
#include "render/plan_export.h"
#include "render/timeline.h"
#include "render/torch_csv.h"

namespace zpipe::cli {
namespace {

using core::ScheduleKind;

struct PlanArgs {
  std::string schedule;
  int pipeline = 0;
  int microbatches = 0;
  int chunks = 0;
  core::StageCost stage_cost{.f = 1, .b = 1, .w = 1, .mem_f = 1, .mem_b = -0.5, .mem_w = -0.5};
  double comm = 0;
  std::optional<double> memory_limit;
  std::string format = "summary";
  bool format_given = false;
  std::string output_format;  // -o: "table" or "json" ("" = not given)
  std::string output_file;    // -f / --file FILE
  bool lower = false;
  int buckets = 0;
  double reduce_cost = 0;
  int width = 0;      // --width; 0 = wide enough for every label
  double budget = 1;  // --budget: search seconds per schedule (0 = the greedy pass alone)
  bool optimal = false;  // --optimal: the exact solver, with --budget as its time limit
  uint64_t seed = 1;  // --seed
};

// A finite number of at most core::kMaxCostValue in absolute value (every number `zpipe plan`
// takes is a time or a memory amount), so NaN, infinities and 1e308 stop here, at once.
absl::StatusOr<double> ParseNumber(absl::string_view flag, absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", value, "' is not a number"));
  }
  if (std::fabs(v) > core::kMaxCostValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": must be at most ", core::PlainNumber(core::kMaxCostValue),
                     " in absolute value (the cost value limit), got ", value));
  }
  return v;
}

// An integer in [min, max]; past `max` the error names the limit (`limit_name`), so that a
// huge value exits 2 at once instead of planning for minutes (docs/design.md "Limits").
absl::StatusOr<int> ParseInt(absl::string_view flag, absl::string_view value, int min, int max,
                             absl::string_view limit_name) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", value, "' is not an integer >= ", min));
  }
  if (v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": must be at most ", max, " (", limit_name, "), got ", value));
  }
  return static_cast<int>(v);
}

// Parses "k1=v1,k2=v2" with keys from `allowed`.
absl::StatusOr<std::map<std::string, double>> ParseKeyValues(
    absl::string_view flag, absl::string_view value, const std::vector<std::string>& allowed) {
  std::map<std::string, double> out;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (std::find(allowed.begin(), allowed.end(), kv.first) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": unknown key '", kv.first, "'"));
    }
    auto v = ParseNumber(absl::StrCat(flag, " ", kv.first), kv.second);
    if (!v.ok()) return v.status();
    out[kv.first] = *v;
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": expected key=value"));
  return out;
}

absl::StatusOr<PlanArgs> ParseArgs(const std::vector<std::string>& args) {
  PlanArgs pa;
  bool mem_b_given = false;
  static const std::set<std::string> kValueFlags = {
      "--schedule", "--pipeline", "-p",        "--microbatches", "--chunks",
      "-m",         "--cost",     "--memory",  "--memory-limit", "--format",
      "-o",         "--output",   "--buckets", "--reduce-cost",  "--width",
      "--budget",   "--seed",     "--file",    "-f"};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    const size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) flag = flag.substr(0, eq);
    // Named before any value is taken, so a typo is reported as itself.
    if (flag != "--lower" && flag != "--optimal" && kValueFlags.count(flag) == 0) {
      if (flag.empty() || flag[0] != '-') {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", flag, "'"));
      }
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", flag, "'"));
    }
    if (flag == "--lower" || flag == "--optimal") {
      if (flag.size() != args[i].size())
        return absl::InvalidArgumentError(absl::StrCat(flag, " takes no value"));
      (flag == "--lower" ? pa.lower : pa.optimal) = true;
      continue;
    }
    if (flag.size() != args[i].size()) {
      value = args[i].substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(flag + ": missing value");
      value = args[++i];
    }
    if (flag == "--schedule") {
      pa.schedule = value;
    } else if (flag == "--pipeline" || flag == "-p") {
      auto v = ParseInt(flag, value, 1, core::kMaxPipeline, "the pipeline limit");
      if (!v.ok()) return v.status();
      pa.pipeline = *v;
    } else if (flag == "--microbatches" || flag == "-m") {
      auto v = ParseInt(flag, value, 1, core::kMaxMicrobatches, "the microbatch limit");
      if (!v.ok()) return v.status();
      pa.microbatches = *v;
    } else if (flag == "--chunks") {
      auto v = ParseInt(flag, value, 2, core::kMaxChunks, "the chunk limit");
      if (!v.ok()) return v.status();
      pa.chunks = *v;
    } else if (flag == "--cost") {
      auto kv = ParseKeyValues(flag, value, {"f", "b", "w", "comm"});
      if (!kv.ok()) return kv.status();
      for (const auto& [k, v] : *kv) {
        if (v < 0) return absl::InvalidArgumentError(absl::StrCat("--cost ", k, ": must be >= 0"));
        if (k == "f") pa.stage_cost.f = v;
        if (k == "b") pa.stage_cost.b = v;
        if (k == "w") pa.stage_cost.w = v;
        if (k == "comm") pa.comm = v;
      }
    } else if (flag == "--memory") {
      auto kv = ParseKeyValues(flag, value, {"f", "b", "w"});
      if (!kv.ok()) return kv.status();
      for (const auto& [k, v] : *kv) {
        if (k == "f") pa.stage_cost.mem_f = v;
        if (k == "b") {
          pa.stage_cost.mem_b = v;
          mem_b_given = true;
        }
        if (k == "w") pa.stage_cost.mem_w = v;
      }
    } else if (flag == "--memory-limit") {
      auto v = ParseNumber(flag, value);
      if (!v.ok()) return v.status();
      if (*v <= 0) return absl::InvalidArgumentError("--memory-limit: must be > 0");
      pa.memory_limit = *v;
    } else if (flag == "--format") {
      pa.format_given = true;
      static const std::vector<std::string> kFormats = {"summary", "text",  "json",     "csv",
                                                        "ascii",   "svg",   "torch-csv"};
      if (std::find(kFormats.begin(), kFormats.end(), value) == kFormats.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--format: '", value,
                         "' is not one of summary, text, json, csv, ascii, svg, torch-csv"));
      }
      pa.format = value;
    } else if (flag == "-o" || flag == "--output") {
      if (value == "text") value = "table";
      if (value != "table" && value != "json") {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, ": '", value,
            "' is not text or json (-o is the output format, as for every zpipe command; the "
            "local plan prints text or json); to write a file use -f FILE"));
      }
      pa.output_format = value;
    } else if (flag == "--file" || flag == "-f") {
      if (value.empty()) return absl::InvalidArgumentError("--file: expected a file name");
      pa.output_file = value;
    } else if (flag == "--buckets") {
      auto v = ParseInt(flag, value, 1, core::kMaxBucketsPerStage, "the per-stage bucket limit");
      if (!v.ok()) return v.status();
      pa.buckets = *v;
    } else if (flag == "--reduce-cost") {
      auto v = ParseNumber(flag, value);
      if (!v.ok()) return v.status();
      if (*v < 0) return absl::InvalidArgumentError("--reduce-cost: must be >= 0");
      pa.reduce_cost = *v;
    } else if (flag == "--budget") {
      // Seconds, with or without the unit: "30" or "30s".
      if (value.size() > 1 && value.back() == 's') value.pop_back();
      auto v = ParseNumber(flag, value);
      if (!v.ok()) return v.status();
      if (*v < 0 || *v > core::kMaxSearchSeconds) {
        return absl::InvalidArgumentError(
            absl::StrCat("--budget: must be in [0, ", core::kMaxSearchSeconds,
                         "] seconds (the search budget limit), got ", value));
      }
      pa.budget = *v;
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &pa.seed)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--seed: '", value, "' is not a non-negative integer"));
      }
    } else if (flag == "--width") {
      auto v = ParseInt(flag, value, render::kMinAsciiWidth, render::kMaxAsciiWidth,
                        "the width limit");
      if (!v.ok()) return v.status();
      pa.width = *v;
    }
  }
  if (!mem_b_given) pa.stage_cost.mem_b = -pa.stage_cost.mem_f - pa.stage_cost.mem_w;
  if (pa.schedule.empty()) return absl::InvalidArgumentError("--schedule is required");
  if (pa.pipeline == 0) return absl::InvalidArgumentError("--pipeline is required");
  if (pa.microbatches == 0) return absl::InvalidArgumentError("--microbatches is required");
  if (pa.output_format == "json") {
    if (pa.format_given && pa.format != "json" && pa.format != "summary") {
      return absl::InvalidArgumentError(
          absl::StrCat("-o json asks for JSON but --format is ", pa.format, "; drop one of them"));
    }
    pa.format = "json";
  }
  if (pa.optimal && pa.schedule == "all") {
    return absl::InvalidArgumentError(
        "--optimal solves one schedule's shape; name it with --schedule (not all)");
  }
  if (pa.optimal && pa.budget == 0) {
    return absl::InvalidArgumentError("--optimal needs a --budget above 0 seconds");
  }
  if (pa.schedule == "all" && pa.format != "summary" && pa.format != "json") {
    return absl::InvalidArgumentError(
        "--schedule all prints a comparison: use --format summary (a table) or json");
  }
  return pa;
}

// The request core::PlanSchedule takes for `schedule` (a name) under the flags.
core::PlanRequest Request(absl::string_view schedule, const PlanArgs& pa) {
  core::PlanRequest req;
  req.schedule = std::string(schedule);
  req.pipeline = pa.pipeline;
  req.microbatches = pa.microbatches;
  req.chunks = core::ParseScheduleKind(schedule).value_or(ScheduleKind::k1F1B) ==
                       ScheduleKind::kInterleaved1F1B
                   ? pa.chunks
                   : 0;
  req.memory_limit = pa.memory_limit;
  req.inputs = [stage = pa.stage_cost, comm = pa.comm, buckets = pa.buckets,
                reduce = pa.reduce_cost](const core::Placement& placement) {
    return core::UniformInputs(placement, stage, comm, buckets, reduce);
  };
  req.lower = pa.lower;
  // With --optimal, --budget is the solver's; the incumbent comes from the default search.
  req.search = {.budget_seconds = pa.optimal ? 1.0 : pa.budget, .seed = pa.seed};
  if (pa.optimal) req.optimal = core::OptimalOptions{.time_limit_seconds = pa.budget};
  return req;
}

// The flag a core::PlanRequest field comes from ("cost.stages[0].f" -> "--cost f"); "" for a
// field the user did not set (the memory limit when it is the schedule's default).
std::string FlagOf(absl::string_view field, const PlanArgs& pa) {
  const absl::string_view root = core::FieldRoot(field);
  if (root == "schedule") return "--schedule";
  if (root == "pipeline") return "--pipeline";
  if (root == "microbatches") return "--microbatches";
  if (root == "chunks") return "--chunks";
  if (root == "memory_limit") return pa.memory_limit.has_value() ? "--memory-limit" : "";
  if (root == "buckets_per_stage") return "--buckets";
  if (root == "reduce_cost") return "--reduce-cost";
  if (root == "search") return "--budget";
  if (field == "cost.comm") return "--cost comm";
  if (const size_t dot = field.rfind("]."); dot != absl::string_view::npos) {
    const absl::string_view key = field.substr(dot + 2);  // f, b, w, mem_f, mem_b, mem_w
    if (absl::StartsWith(key, "mem_")) return absl::StrCat("--memory ", key.substr(4));
    return absl::StrCat("--cost ", key);
  }
  if (absl::StartsWith(field, "cost.stages")) return "--memory";  // the memory deltas
  if (root == "cost") return "--cost";
  return "";
}

// "zpipe plan: FLAG: message" for an error core names a field of.
std::string ErrorLine(const absl::Status& status, const PlanArgs& pa) {
  const std::string flag = FlagOf(core::ErrorField(status), pa);
  return absl::StrCat("zpipe plan: ", flag, flag.empty() ? "" : ": ", status.message(), "\n");
}

using Planned = core::PlannedSchedule;

absl::StatusOr<Planned> MakePlan(ScheduleKind kind, const PlanArgs& pa) {
  return core::PlanSchedule(Request(core::ScheduleName(kind), pa));
}

std::string Plain(double v) { return core::PlainNumber(v); }

double MaxOf(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The solver's lines of the summary: the span it reached, the proven bound and the gap between
// them, and how far the generated plan was from that bound.
std::string OptimalLines(const Planned& p) {
  const core::OptimalResult& o = *p.optimal;
  std::string out = absl::StrFormat("optimal       span %s, bound %s, gap %.2f%% ", Plain(o.span),
                                    Plain(o.bound), 100 * o.gap());
  absl::StrAppendFormat(&out,
                        o.optimal ? "(proven optimal: every order searched, %d nodes, %.2f s)\n"
                                  : "(budget ran out after %d nodes, %.2f s)\n",
                        o.nodes, o.seconds);
  absl::StrAppendFormat(&out, "generated     span %s (%.2f%% above the bound%s)\n",
                        Plain(o.incumbent_span), 100 * (o.incumbent_span / o.bound - 1),
                        o.improved ? "; the solver's plan is shorter" : "");
  return out;
}

std::string Summary(const Planned& p) {
  const core::Plan& plan = p.plan;
  std::string out;
  absl::StrAppendFormat(&out, "schedule      %s\n", plan.schedule);
  absl::StrAppendFormat(&out, "shape         p=%d ranks, v=%d chunks (%s placement), m=%d\n",
                        plan.num_ranks(), plan.placement.chunks_per_rank(),
                        core::PlacementKindName(plan.placement.kind()), plan.num_microbatches);
  absl::StrAppendFormat(&out, "span          %s (the longest rank's first start to last end)\n",
                        Plain(p.sim.span));
  absl::StrAppendFormat(&out, "makespan      %s (first start to last end over all ranks)\n",
                        Plain(p.sim.global_makespan));
  absl::StrAppendFormat(&out, "bubble rate   %.4f\n", p.sim.bubble_rate);
  absl::StrAppendFormat(&out,
                        "lower bound   span >= %s, bubble >= %.4f (a search could gain at most "
                        "%.4f of bubble)\n",
                        Plain(p.span_lower_bound), p.bubble_lower_bound,
                        std::max(0.0, p.sim.bubble_rate - p.bubble_lower_bound));
  if (p.optimal.has_value()) absl::StrAppend(&out, OptimalLines(p));
  absl::StrAppendFormat(&out, "memory limit  %s per rank; peak %s\n", Plain(p.memory_limit),
                        Plain(MaxOf(p.sim.peak_memory)));
  if (p.sim.total_reduce > 0) {
    absl::StrAppendFormat(&out, "reduce        total %s, exposed %s, overlap %.4f\n",
                          Plain(p.sim.total_reduce), Plain(p.sim.total_exposed_reduce),
                          p.sim.reduce_overlap);
  }
  absl::StrAppendFormat(&out, "actions       %d\n", plan.num_actions());
  absl::StrAppend(&out, "\nrank        busy        idle  bubble  peak_memory\n");
  for (int r = 0; r < plan.num_ranks(); ++r) {
    absl::StrAppendFormat(&out, "%4d  %10s  %10s  %6.4f  %11s\n", r, Plain(p.sim.busy[r]),
                          Plain(p.sim.idle[r]), p.sim.rank_bubble[r], Plain(p.sim.peak_memory[r]));
  }
  return out;
}

// One row of the comparison: a schedule's plan, or why there is none.
struct Compared {
  ScheduleKind kind;
  absl::StatusOr<Planned> planned;
};

std::vector<Compared> CompareAll(const PlanArgs& pa) {
  std::vector<Compared> rows;
  for (ScheduleKind kind : core::AllScheduleKinds()) rows.push_back({kind, MakePlan(kind, pa)});
  return rows;
}

std::string CompareTable(const PlanArgs& pa, const std::vector<Compared>& rows) {
  std::string out = absl::StrFormat("p=%d m=%d cost f=%s b=%s w=%s comm=%s\n\n", pa.pipeline,
                                    pa.microbatches, Plain(pa.stage_cost.f), Plain(pa.stage_cost.b),
                                    Plain(pa.stage_cost.w), Plain(pa.comm));
  absl::StrAppendFormat(&out, "%-12s %12s %12s %8s %8s %12s %12s %10s\n", "schedule", "span",
                        "makespan", "bubble", "bound", "peak_memory", "mem_limit", "gen_ms");
  for (const Compared& row : rows) {
    if (!row.planned.ok()) {
      absl::StrAppendFormat(&out, "%-12s  unavailable: %s\n", core::ScheduleName(row.kind),
                            row.planned.status().message());
      continue;
    }
    const Planned& p = *row.planned;
    absl::StrAppendFormat(
        &out, "%-12s %12s %12s %8.4f %8.4f %12s %12s %10.2f\n", core::ScheduleName(row.kind),
        Plain(p.sim.span), Plain(p.sim.global_makespan), p.sim.bubble_rate, p.bubble_lower_bound,
        Plain(MaxOf(p.sim.peak_memory)), Plain(p.memory_limit), 1000 * p.generate_seconds);
  }
  return out;
}

using Json = nlohmann::ordered_json;

// A number as core's plan JSON writes it (core/plan_export.h): an integer when it is one
// ("span_lower_bound":33), else the shortest text that reads back the same; null for NaN.
Json Number(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == std::trunc(v) && std::abs(v) < 9007199254740992.0) return static_cast<int64_t>(v);
  return v;
}

std::string DumpLine(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// The lower bounds, and the exact solver's result when it ran (--optimal), as fields of `out`.
void AddBounds(const Planned& p, Json& out) {
  out["span_lower_bound"] = Number(p.span_lower_bound);
  out["bubble_lower_bound"] = Number(p.bubble_lower_bound);
  if (!p.optimal.has_value()) return;
  const core::OptimalResult& o = *p.optimal;
  out["optimal"] = {{"span", Number(o.span)},
                    {"bound", Number(o.bound)},
                    {"gap", Number(o.gap())},
                    {"proven_optimal", o.optimal},
                    {"generated_span", Number(o.incumbent_span)},
                    {"nodes", o.nodes},
                    {"seconds", Number(o.seconds)}};
}

// The plan JSON (render::PlanToJson, one object) with the bounds added as its last fields.
std::string PlanJson(const Planned& p) {
  Json json = Json::parse(render::PlanToJson(p.plan, &p.sim));
  AddBounds(p, json);
  return DumpLine(json);
}

// {"pipeline":P,"microbatches":M,"cost":{...},"schedules":[{"schedule":..,"span":..,
//  "makespan":..,"bubble_rate":..,"span_lower_bound":..,"bubble_lower_bound":..,
//  "peak_memory":..,"memory_limit":..,"generate_ms":..} or
//  {"schedule":..,"error":"..."}, ...]}
std::string CompareJson(const PlanArgs& pa, const std::vector<Compared>& rows) {
  Json schedules = Json::array();
  for (const Compared& row : rows) {
    Json item = {{"schedule", std::string(core::ScheduleName(row.kind))}};
    if (!row.planned.ok()) {
      item["error"] = std::string(row.planned.status().message());
      schedules.push_back(std::move(item));
      continue;
    }
    const Planned& p = *row.planned;
    item["span"] = Number(p.sim.span);
    item["makespan"] = Number(p.sim.global_makespan);
    item["bubble_rate"] = Number(p.sim.bubble_rate);
    item["span_lower_bound"] = Number(p.span_lower_bound);
    item["bubble_lower_bound"] = Number(p.bubble_lower_bound);
    item["peak_memory"] = Number(MaxOf(p.sim.peak_memory));
    item["memory_limit"] = Number(p.memory_limit);
    item["generate_ms"] = Number(1000 * p.generate_seconds);
    schedules.push_back(std::move(item));
  }
  const Json out = {{"pipeline", pa.pipeline},
                    {"microbatches", pa.microbatches},
                    {"cost",
                     {{"f", Number(pa.stage_cost.f)},
                      {"b", Number(pa.stage_cost.b)},
                      {"w", Number(pa.stage_cost.w)},
                      {"comm", Number(pa.comm)}}},
                    {"schedules", std::move(schedules)}};
  return DumpLine(out);
}

}  // namespace

std::string PlanUsage() {
  return "usage: zpipe plan --schedule NAME|all --pipeline P --microbatches M\n"
         "                  [--chunks V] [--cost f=T_F,b=T_B,w=T_W,comm=T_comm]\n"
         "                  [--memory f=M_F,b=M_B,w=M_W] [--memory-limit X]\n"
         "                  [--lower] [--buckets N --reduce-cost T]\n"
         "                  [--budget SECONDS] [--seed N] [--optimal]\n"
         "                  [--format summary|text|json|csv|ascii|svg|torch-csv] [--width N]\n"
         "                  [-o text|json] [-f FILE]\n"
         "schedules: gpipe 1f1b interleaved zb-h1 zb-h2 zb-1p zb-2p zb-auto zb-v v-half v-min "
         "dualpipe-v\n"
         "--cost and --memory are per stage (a stage is one chunk for v = 2 schedules); defaults\n"
         "f=1,b=1,w=1,comm=0 and memory f=1,w=-0.5 (b = -f - w unless given).\n"
         "--budget: search time per schedule for zb-1p/2p/auto, zb-v, v-half, v-min (default 1,\n"
         "0 = the greedy pass alone); the same --seed gives the same plan on every machine.\n"
         "--optimal: after the search, branch and bound over every valid order for the shortest\n"
         "span, for --budget seconds (30 or 30s; wall clock); prints the span, a proven lower\n"
         "bound and the gap between them (0 when the optimum is proven).\n"
         "-o json prints JSON (the plan, or the comparison for --schedule all); -f FILE (--file)\n"
         "writes FILE instead of stdout. --width defaults to what fits every label.\n"
         "--format torch-csv: the compute-only CSV schedule PyTorch's _PipelineScheduleRuntime\n"
         "loads (torchtitan's pipeline_parallel_schedule_csv): one row per rank, e.g. 0F0,0I0,0W0\n"
         "(B -> I, W -> W, BW -> B), stages numbered as PyTorch's stage indices.\n";
}

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      out << PlanUsage();
      return 0;
    }
  }
  auto pa = ParseArgs(args);
  if (!pa.ok()) {
    err << "zpipe plan: " << pa.status().message() << "\n";
    return 2;
  }
  // Every bound of every schedule asked for is checked before any of them is planned.
  std::vector<std::string> names = {pa->schedule};
  if (pa->schedule == "all") {
    names.clear();
    for (ScheduleKind kind : core::AllScheduleKinds()) {
      names.emplace_back(core::ScheduleName(kind));
    }
  }
  for (const std::string& name : names) {
    if (absl::Status st = core::CheckPlanRequest(Request(name, *pa)); !st.ok()) {
      err << ErrorLine(st, *pa);
      return 2;
    }
  }
  std::string text;
  if (pa->schedule == "all") {
    const std::vector<Compared> rows = CompareAll(*pa);
    text = pa->format == "json" ? CompareJson(*pa, rows) : CompareTable(*pa, rows);
  } else {
    absl::StatusOr<Planned> planned = core::PlanSchedule(Request(pa->schedule, *pa));
    if (!planned.ok()) {
      err << ErrorLine(planned.status(), *pa);
      return 2;
    }
    if (pa->format == "summary") text = Summary(*planned);
    if (pa->format == "text") text = core::PlanToText(planned->plan);
    if (pa->format == "json") text = PlanJson(*planned);
    if (pa->format == "csv") text = render::PlanToCsv(planned->plan, &planned->sim);
    if (pa->format == "ascii") {
      text = render::RenderAscii(planned->plan, planned->sim, {.width = pa->width});
    }
    if (pa->format == "svg") text = render::RenderSvg(planned->plan, planned->sim);
    if (pa->format == "torch-csv") {
      absl::StatusOr<std::string> csv = render::PlanToTorchCsv(planned->plan);
      if (!csv.ok()) {
        err << "zpipe plan: --format torch-csv: " << csv.status().message() << "\n";
        return 2;
      }
      text = *std::move(csv);
    }
  }
  if (pa->output_file.empty()) {
    out << text;
    return 0;
  }
  std::ofstream file(pa->output_file);
  file << text;
  if (!file) {
    err << "zpipe plan: --file: cannot write '" << pa->output_file << "'\n";
    return 2;
  }
  return 0;
}

}  // namespace zpipe::cli
