#include "client/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/number_format.h"
#include "core/plan_limits.h"
#include "core/planning.h"
#include "core/schedule.h"
#include "core/simulator.h"
#include "core/status_field.h"
#include "flags/values.h"
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
  core::RecomputePolicy recompute = core::RecomputePolicy::kOff;  // --recompute
  bool recompute_given = false;  // --recompute off says no to the recomputation suggestion too
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

constexpr absl::string_view kFormats = "summary text json csv ascii svg torch-csv";

// The local plan's shape and cost model.
std::vector<FlagSpec> ShapeFlags() {
  return {
      {.name = "--schedule",
       .value = ValueKind::kChoice,
       .choices = "gpipe 1f1b interleaved zb-h1 zb-h2 zb-1p zb-2p zb-auto zb-v v-half v-min "
                  "dualpipe-v all",
       .help = "the schedule to plan",
       .value_name = "NAME|all",
       .more = ": gpipe 1f1b interleaved zb-h1 zb-h2 zb-1p zb-2p zb-auto zb-v v-half v-min "
               "dualpipe-v, or all to compare them"},
      {.name = "--pipeline",
       .short_name = "-p",
       .value = ValueKind::kText,
       .help = "pipeline stages",
       .value_name = "P",
       .more = "(ranks)"},
      {.name = "--microbatches",
       .short_name = "-m",
       .value = ValueKind::kText,
       .help = "microbatches",
       .value_name = "M",
       .more = "per iteration"},
      {.name = "--chunks",
       .value = ValueKind::kText,
       .help = "chunks per rank",
       .value_name = "V",
       .more = "(interleaved)"},
      {.name = "--cost",
       .value = ValueKind::kText,
       .help = "f=,b=,w=,comm= per stage",
       .value_name = "f=T_F,b=T_B,w=T_W,comm=T_comm",
       .more = "(default f=1,b=1,w=1,comm=0; r=T_R, the recomputed forward, default T_F)"},
      {.name = "--memory",
       .value = ValueKind::kText,
       .help = "f=,b=,w= per stage",
       .value_name = "f=M_F,b=M_B,w=M_W",
       .more = "(default f=1,w=-0.5; b = -f - w unless given; keep=M, what a recomputed "
               "forward holds, default 0)"},
      {.name = "--memory-limit",
       .value = ValueKind::kText,
       .help = "activation memory limit",
       .value_name = "X",
       .more = "per rank (default: the schedule's own)"},
      {.name = "--recompute",
       .value = ValueKind::kChoice,
       .choices = "off auto all",
       .help = "recompute forwards before B",
       .value_name = "off|auto|all",
       .more = "per stage instead of keeping activations: auto where that shortens the span at "
               "the memory limit (or makes a plan fit), all on every stage (default off)"},
      {.name = "--lower", .help = "lower to send/recv", .more = "actions"},
      {.name = "--buckets",
       .value = ValueKind::kText,
       .help = "gradient buckets per stage",
       .value_name = "N",
       .more = "(with --reduce-cost)"},
      {.name = "--reduce-cost",
       .value = ValueKind::kText,
       .help = "cost of one bucket's reduce",
       .value_name = "T"},
  };
}

// How the local plan is searched, and what it prints where.
std::vector<FlagSpec> SearchAndOutputFlags() {
  return {
      {.name = "--budget",
       .value = ValueKind::kText,
       .help = "search seconds per schedule",
       .value_name = "SECONDS",
       .more = "for zb-1p/2p/auto, zb-v, v-half, v-min (30 or 30s; default 1, 0 = the greedy "
               "pass alone); with --optimal, the solver's time limit"},
      {.name = "--seed",
       .value = ValueKind::kText,
       .help = "search seed",
       .value_name = "N",
       .more = "(the same --seed gives the same plan on every machine)"},
      {.name = "--optimal",
       .help = "solve for the shortest span",
       .more = "after the search: branch and bound over every valid order, for --budget seconds "
               "(wall clock); prints the span, a proven lower bound and the gap between them (0 "
               "when the optimum is proven)"},
      {.name = "--format",
       .value = ValueKind::kChoice,
       .choices = kFormats,
       .help = "what to print",
       .more = "(default summary)"},
      {.name = "--width",
       .value = ValueKind::kText,
       .help = "ascii width",
       .value_name = "N",
       .more = "(default: what fits every label)"},
      {.name = "--file",
       .short_name = "-f",
       .value = ValueKind::kFile,
       .help = "the file to write",
       .more = "instead of stdout"},
  };
}

// The flags of the local plan; the command table lists them under `plan` (with --job, --rank).
std::vector<FlagSpec> MakeLocalPlanFlags() {
  std::vector<FlagSpec> flags = ShapeFlags();
  for (const FlagSpec& f : SearchAndOutputFlags()) flags.push_back(f);
  return flags;
}

// The local plan's whole parser: its flags and -o text|json.
CommandSpec LocalPlanSpec() {
  CommandSpec spec{
      .name = "plan",
      .synopsis =
          "plan --schedule NAME|all --pipeline P --microbatches M\n"
          "                  [--chunks V] [--cost f=T_F,b=T_B,w=T_W,comm=T_comm]\n"
          "                  [--memory f=M_F,b=M_B,w=M_W] [--memory-limit X]\n"
          "                  [--recompute off|auto|all]\n"
          "                  [--lower] [--buckets N --reduce-cost T]\n"
          "                  [--budget SECONDS] [--seed N] [--optimal]\n"
          "                  [--format summary|text|json|csv|ascii|svg|torch-csv] "
          "[--width N]\n"
          "                  [-o text|json] [-f FILE]",
      .flags = LocalPlanFlags(),
      .description =
          "plans a schedule here and prints the plan and its simulated statistics\n"
          "(zpipe plan --job ID shows a job's plan from the coordinator)",
      .notes =
          "--cost and --memory are per stage (a stage is one chunk for v = 2 schedules).\n"
          "--format torch-csv: the compute-only CSV schedule PyTorch's "
          "_PipelineScheduleRuntime\nloads (torchtitan's pipeline_parallel_schedule_csv): "
          "one row per rank, e.g. 0F0,0I0,0W0\n(B -> I, W -> W, BW -> B), stages numbered "
          "as PyTorch's stage indices."};
  spec.flags.push_back({.name = "--output",
                        .short_name = "-o",
                        .value = ValueKind::kChoice,
                        .choices = "text json",
                        .help = "print text or JSON",
                        .more = "(the plan, or the comparison for --schedule all)"});
  return spec;
}

// A number `zpipe plan` takes (a time or a memory amount) from flag `spelling`.
absl::StatusOr<double> NumberFlag(const Args& args, const std::string& name) {
  return ParseNumber(args.Spelling(name), args.Get(name));
}

// -p, -m, --chunks: the plan's shape, each within its limit.
absl::Status ParseShape(const Args& args, PlanArgs& pa) {
  struct Bound {
    const char* name;
    int* out;
    int min, max;
    const char* limit;
  };
  for (const Bound& b :
       {Bound{"--pipeline", &pa.pipeline, 1, core::kMaxPipeline, "the pipeline limit"},
        Bound{"--microbatches", &pa.microbatches, 1, core::kMaxMicrobatches,
              "the microbatch limit"},
        Bound{"--chunks", &pa.chunks, 2, core::kMaxChunks, "the chunk limit"}}) {
    if (!args.Has(b.name)) continue;
    absl::StatusOr<int> v =
        ParseInt(args.Spelling(b.name), args.Get(b.name), b.min, b.max, b.limit);
    if (!v.ok()) return v.status();
    *b.out = *v;
  }
  pa.schedule = args.Get("--schedule");
  if (pa.schedule.empty()) return absl::InvalidArgumentError("--schedule is required");
  if (pa.pipeline == 0) return absl::InvalidArgumentError("--pipeline is required");
  if (pa.microbatches == 0) return absl::InvalidArgumentError("--microbatches is required");
  return absl::OkStatus();
}

// --cost, --memory, --memory-limit, --buckets, --reduce-cost: the cost model.
absl::Status ParseCosts(const Args& args, PlanArgs& pa) {
  if (args.Has("--cost")) {
    auto kv = ParseKeyValues("--cost", args.Get("--cost"), {"f", "b", "w", "comm", "r"});
    if (!kv.ok()) return kv.status();
    for (const auto& [k, v] : *kv) {
      if (v < 0) return absl::InvalidArgumentError(absl::StrCat("--cost ", k, ": must be >= 0"));
      if (k == "f") pa.stage_cost.f = v;
      if (k == "b") pa.stage_cost.b = v;
      if (k == "w") pa.stage_cost.w = v;
      if (k == "comm") pa.comm = v;
      if (k == "r") pa.stage_cost.r = v;
    }
  }
  bool mem_b_given = false;
  if (args.Has("--memory")) {
    auto kv = ParseKeyValues("--memory", args.Get("--memory"), {"f", "b", "w", "keep"});
    if (!kv.ok()) return kv.status();
    for (const auto& [k, v] : *kv) {
      if (k == "f") pa.stage_cost.mem_f = v;
      if (k == "b") pa.stage_cost.mem_b = v;
      if (k == "w") pa.stage_cost.mem_w = v;
      if (k == "keep") pa.stage_cost.mem_keep = v;
      mem_b_given = mem_b_given || k == "b";
    }
  }
  if (!mem_b_given) pa.stage_cost.mem_b = -pa.stage_cost.mem_f - pa.stage_cost.mem_w;
  if (args.Has("--memory-limit")) {
    absl::StatusOr<double> v = NumberFlag(args, "--memory-limit");
    if (!v.ok()) return v.status();
    if (*v <= 0) return absl::InvalidArgumentError("--memory-limit: must be > 0");
    pa.memory_limit = *v;
  }
  if (args.Has("--recompute")) {
    absl::StatusOr<core::RecomputePolicy> policy =
        core::ParseRecomputePolicy(args.Get("--recompute"));
    if (!policy.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--recompute: ", policy.status().message()));
    }
    pa.recompute = *policy;
    pa.recompute_given = true;
  }
  if (args.Has("--buckets")) {
    absl::StatusOr<int> v = ParseInt("--buckets", args.Get("--buckets"), 1,
                                     core::kMaxBucketsPerStage, "the per-stage bucket limit");
    if (!v.ok()) return v.status();
    pa.buckets = *v;
  }
  if (args.Has("--reduce-cost")) {
    absl::StatusOr<double> v = NumberFlag(args, "--reduce-cost");
    if (!v.ok()) return v.status();
    if (*v < 0) return absl::InvalidArgumentError("--reduce-cost: must be >= 0");
    pa.reduce_cost = *v;
  }
  return absl::OkStatus();
}

// --budget (a duration: 30, 30s, 500ms), --seed, --optimal, --lower: how the plan is searched.
absl::Status ParseSearch(const Args& args, PlanArgs& pa) {
  pa.lower = args.Has("--lower");
  pa.optimal = args.Has("--optimal");
  if (args.Has("--budget")) {
    absl::StatusOr<absl::Duration> d = flags::ParseDuration(args.Get("--budget"));
    if (!d.ok())
      return absl::InvalidArgumentError(absl::StrCat("--budget: ", d.status().message()));
    const double seconds = absl::ToDoubleSeconds(*d);
    if (seconds < 0 || seconds > core::kMaxSearchSeconds) {
      return absl::InvalidArgumentError(
          absl::StrCat("--budget: must be in [0, ", core::kMaxSearchSeconds,
                       "] seconds (the search budget limit), got ", args.Get("--budget")));
    }
    pa.budget = seconds;
  }
  if (args.Has("--seed") && !absl::SimpleAtoi(args.Get("--seed"), &pa.seed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seed: '", args.Get("--seed"), "' is not a non-negative integer"));
  }
  return absl::OkStatus();
}

// --format, -o, -f, --width: what is printed, and where.
absl::Status ParseOutput(const Args& args, PlanArgs& pa) {
  if (args.Has("--format")) {
    pa.format_given = true;
    pa.format = args.Get("--format");
    if (std::string problem = flags::OneOf(kFormats)(pa.format); !problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--format: '", pa.format,
                       "' is not one of summary, text, json, csv, ascii, svg, torch-csv"));
    }
  }
  if (args.Has("--output")) {
    std::string value = args.Get("--output");
    if (value == "text") value = "table";
    if (value != "table" && value != "json") {
      return absl::InvalidArgumentError(absl::StrCat(
          args.Spelling("--output"), ": '", value,
          "' is not text or json (-o is the output format, as for every zpipe command; the "
          "local plan prints text or json); to write a file use -f FILE"));
    }
    pa.output_format = value;
  }
  if (args.Has("--file")) {
    pa.output_file = args.Get("--file");
    if (pa.output_file.empty()) return absl::InvalidArgumentError("--file: expected a file name");
  }
  if (args.Has("--width")) {
    absl::StatusOr<int> v = ParseInt("--width", args.Get("--width"), render::kMinAsciiWidth,
                                     render::kMaxAsciiWidth, "the width limit");
    if (!v.ok()) return v.status();
    pa.width = *v;
  }
  return absl::OkStatus();
}

// What the flags cannot ask for together.
absl::Status CheckCombinations(PlanArgs& pa) {
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
  if (pa.optimal && pa.recompute != core::RecomputePolicy::kOff) {
    return absl::InvalidArgumentError(
        "--optimal does not model recomputation; drop --recompute or --optimal");
  }
  if (pa.optimal && pa.budget == 0) {
    return absl::InvalidArgumentError("--optimal needs a --budget above 0 seconds");
  }
  if (pa.schedule == "all" && pa.format != "summary" && pa.format != "json") {
    return absl::InvalidArgumentError(
        "--schedule all prints a comparison: use --format summary (a table) or json");
  }
  return absl::OkStatus();
}

// The flags, parsed by CLI11 from LocalPlanSpec(), then each value checked and converted.
absl::StatusOr<PlanArgs> ParseArgs(const Args& args) {
  if (!args.positionals().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args.positionals()[0], "'"));
  }
  PlanArgs pa;
  for (absl::Status (*step)(const Args&, PlanArgs&) :
       {ParseShape, ParseCosts, ParseSearch, ParseOutput}) {
    if (absl::Status s = step(args, pa); !s.ok()) return s;
  }
  if (absl::Status s = CheckCombinations(pa); !s.ok()) return s;
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
  req.recompute = pa.recompute;
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
  if (root == "recompute") return "--recompute";
  if (field == "cost.comm") return "--cost comm";
  if (const size_t dot = field.rfind("]."); dot != absl::string_view::npos) {
    // f, b, w, r, mem_f, mem_b, mem_w, mem_keep
    const absl::string_view key = field.substr(dot + 2);
    if (absl::StartsWith(key, "mem_")) return absl::StrCat("--memory ", key.substr(4));
    return absl::StrCat("--cost ", key);
  }
  if (absl::StartsWith(field, "cost.stages")) return "--memory";  // the memory deltas
  if (root == "cost") return "--cost";
  return "";
}

// "zpipe plan: FLAG: message" for an error core names a field of. A memory limit no plan keeping
// every activation fits gets the way out: recomputation.
std::string ErrorLine(const absl::Status& status, const PlanArgs& pa) {
  const std::string flag = FlagOf(core::ErrorField(status), pa);
  const bool recompute_helps = core::FieldRoot(core::ErrorField(status)) == "memory_limit" &&
                               pa.memory_limit.has_value() &&
                               pa.recompute == core::RecomputePolicy::kOff;
  return absl::StrCat("zpipe plan: ", flag, flag.empty() ? "" : ": ", status.message(),
                      recompute_helps ? " (--recompute auto recomputes forwards to fit it)" : "",
                      "\n");
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
                        o.optimal ? "(proven optimal: no valid order is shorter, %d nodes, %.2f s)\n"
                                  : "(budget ran out after %d nodes, %.2f s)\n",
                        o.nodes, o.seconds);
  absl::StrAppendFormat(&out, "generated     span %s (%.2f%% above the bound%s)\n",
                        Plain(o.incumbent_span), 100 * (o.incumbent_span / o.bound - 1),
                        o.improved ? "; the solver's plan is shorter" : "");
  return out;
}

// The stages a plan recomputes, "0,1", or "none".
std::string RecomputedList(const Planned& p) {
  const std::vector<int> stages = core::StageIndices(p.recompute_stages);
  return stages.empty() ? "none" : absl::StrJoin(stages, ",");
}

// With --recompute: what the planner chose, and the bubble keeping every activation gives at the
// same limit, so that the lines say what recomputation bought.
std::string RecomputeLines(const Planned& p) {
  std::string out = absl::StrFormat("recompute     stages %s of %d (R time %s)\n",
                                    RecomputedList(p), p.plan.num_stages(),
                                    Plain(p.sim.recompute_time));
  if (!p.keep_span.has_value()) {
    absl::StrAppendFormat(&out,
                          "              without recomputation no plan fits this limit; with it: "
                          "span %s, bubble %.4f\n",
                          Plain(p.compute_span), p.compute_bubble);
    return out;
  }
  absl::StrAppendFormat(&out,
                        "              without recomputation at this limit: span %s, bubble "
                        "%.4f; with it: span %s, bubble %.4f%s\n",
                        Plain(*p.keep_span), *p.keep_bubble, Plain(p.compute_span),
                        p.compute_bubble,
                        p.compute_span < *p.keep_span ? "" : " (keeping is as fast: no R)");
  return out;
}

// What --recompute auto would give where the user set --memory-limit and no --recompute: its
// plan at the same limit, when that plan recomputes some stages and its span is strictly shorter
// than the plan printed. The plan printed stays the keep-everything one (the user did not ask to
// recompute; --recompute off turns the probe off too). The probe plans with the greedy pass
// alone: --recompute auto chooses its stages by greedy plans too (core/recompute.h), and a second
// search would double the command's time, so its span is what the greedy pass reaches; the
// search of --recompute auto may come out shorter still.
struct RecomputeSuggestion {
  std::vector<int> stages;
  double span = 0;
  double bubble = 0;
};

std::optional<RecomputeSuggestion> SuggestRecompute(const PlanArgs& pa, const Planned& kept) {
  if (!pa.memory_limit.has_value() || pa.recompute_given || pa.optimal) {
    return std::nullopt;
  }
  core::PlanRequest req = Request(pa.schedule, pa);
  req.recompute = core::RecomputePolicy::kAuto;
  req.search.budget_seconds = 0;
  absl::StatusOr<Planned> probe = core::PlanSchedule(req);
  if (!probe.ok()) return std::nullopt;  // the plan printed is the answer; nothing to add
  RecomputeSuggestion out{.stages = core::StageIndices(probe->recompute_stages),
                          .span = probe->sim.span,
                          .bubble = probe->sim.bubble_rate};
  // Both spans come from the same chain (lowering, reductions), so they compare like for like;
  // the margin keeps rounding noise from reading as a gain.
  const bool shorter = out.span < kept.sim.span - 1e-9 * std::max(1.0, kept.sim.span);
  if (out.stages.empty() || !shorter) return std::nullopt;
  return out;
}

// "recompute     --recompute auto recomputes stages 0,1: span 41 -> 33, bubble .. -> .."
std::string SuggestionLine(const Planned& kept, const RecomputeSuggestion& s) {
  return absl::StrFormat(
      "recompute     --recompute auto recomputes stages %s: span %s -> %s, bubble %.4f -> %.4f\n",
      absl::StrJoin(s.stages, ","), Plain(kept.sim.span), Plain(s.span), kept.sim.bubble_rate,
      s.bubble);
}

std::string Summary(const Planned& p, const std::optional<RecomputeSuggestion>& suggestion) {
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
  if (p.polish.has_value() && p.polish->improved()) {
    absl::StrAppendFormat(&out,
                          "polished      span %s; the generated plan's %s (%d solver nodes)\n",
                          Plain(p.polish->span), Plain(p.polish->generated_span), p.polish->nodes);
  }
  if (p.optimal.has_value()) absl::StrAppend(&out, OptimalLines(p));
  absl::StrAppendFormat(&out, "memory limit  %s per rank; peak %s\n", Plain(p.memory_limit),
                        Plain(MaxOf(p.sim.peak_memory)));
  if (!p.recompute_stages.empty()) absl::StrAppend(&out, RecomputeLines(p));
  if (suggestion.has_value()) absl::StrAppend(&out, SuggestionLine(p, *suggestion));
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
    if (!p.recompute_stages.empty()) {
      out.pop_back();  // the newline: the row goes on
      absl::StrAppend(&out, "  recompute ", RecomputedList(p), "\n");
    }
  }
  return out;
}

using Json = nlohmann::ordered_json;

// A number as core's plan JSON writes it (render/plan_export.h): an integer when it is one
// ("span_lower_bound":33), else the shortest text that reads back the same; null for NaN.
Json Number(double v) {
  if (!std::isfinite(v)) return nullptr;
  if (v == std::trunc(v) && std::abs(v) < 9007199254740992.0) return static_cast<int64_t>(v);
  return v;
}

std::string DumpLine(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// {"stages":[0,1],"time":..,"span":..,"bubble":..,"keep_span":..|null,"keep_bubble":..|null}:
// what --recompute chose, and the keep-everything plan at the same limit (null: none fits).
Json RecomputeJson(const Planned& p) {
  Json stages = core::StageIndices(p.recompute_stages);
  auto optional = [](const std::optional<double>& v) { return v ? Number(*v) : Json(nullptr); };
  return {{"stages", std::move(stages)},       {"time", Number(p.sim.recompute_time)},
          {"span", Number(p.compute_span)},    {"bubble", Number(p.compute_bubble)},
          {"keep_span", optional(p.keep_span)}, {"keep_bubble", optional(p.keep_bubble)}};
}

// The lower bounds, the polish when it ran and the exact solver's result when it ran
// (--optimal), as fields of `out`.
void AddBounds(const Planned& p, Json& out) {
  out["span_lower_bound"] = Number(p.span_lower_bound);
  out["bubble_lower_bound"] = Number(p.bubble_lower_bound);
  if (!p.recompute_stages.empty()) out["recompute"] = RecomputeJson(p);
  if (p.polish.has_value()) {
    out["polish"] = {{"generated_span", Number(p.polish->generated_span)},
                     {"span", Number(p.polish->span)},
                     {"nodes", p.polish->nodes}};
  }
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

// The plan JSON (render::PlanToJson, one object) with the bounds added as its last fields, then
// "recompute_suggestion":{"recompute":"auto","stages":[0,1],"span":..,"bubble":..} when
// SuggestRecompute found a shorter plan.
std::string PlanJson(const Planned& p, const std::optional<RecomputeSuggestion>& suggestion) {
  Json json = Json::parse(render::PlanToJson(p.plan, &p.sim));
  AddBounds(p, json);
  if (suggestion.has_value()) {
    json["recompute_suggestion"] = {{"recompute", "auto"},
                                    {"stages", suggestion->stages},
                                    {"span", Number(suggestion->span)},
                                    {"bubble", Number(suggestion->bubble)}};
  }
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
    if (!p.recompute_stages.empty()) item["recompute"] = RecomputeJson(p);
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

// The error line for `status` ("zpipe plan: FLAG: message\n") as an error to print.
absl::Status Line(const absl::Status& status, const PlanArgs& pa) {
  return absl::InvalidArgumentError(ErrorLine(status, pa));
}

// Every bound of every schedule asked for, checked before any of them is planned.
absl::Status CheckBounds(const PlanArgs& pa) {
  std::vector<std::string> names = {pa.schedule};
  if (pa.schedule == "all") {
    names.clear();
    for (ScheduleKind kind : core::AllScheduleKinds()) {
      names.emplace_back(core::ScheduleName(kind));
    }
  }
  for (const std::string& name : names) {
    if (absl::Status st = core::CheckPlanRequest(Request(name, pa)); !st.ok()) return Line(st, pa);
  }
  return absl::OkStatus();
}

// What `zpipe plan` prints: the comparison, or the one plan in --format. Errors are whole lines.
absl::StatusOr<std::string> Render(const PlanArgs& pa) {
  if (pa.schedule == "all") {
    const std::vector<Compared> rows = CompareAll(pa);
    return pa.format == "json" ? CompareJson(pa, rows) : CompareTable(pa, rows);
  }
  absl::StatusOr<Planned> planned = core::PlanSchedule(Request(pa.schedule, pa));
  if (!planned.ok()) return Line(planned.status(), pa);
  if (pa.format == "summary") return Summary(*planned, SuggestRecompute(pa, *planned));
  if (pa.format == "text") return core::PlanToText(planned->plan);
  if (pa.format == "json") return PlanJson(*planned, SuggestRecompute(pa, *planned));
  if (pa.format == "csv") return render::PlanToCsv(planned->plan, &planned->sim);
  if (pa.format == "ascii")
    return render::RenderAscii(planned->plan, planned->sim, {.width = pa.width});
  if (pa.format == "svg") return render::RenderSvg(planned->plan, planned->sim);
  absl::StatusOr<std::string> csv = render::PlanToTorchCsv(planned->plan);  // torch-csv
  if (!csv.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("zpipe plan: --format torch-csv: ", csv.status().message(), "\n"));
  }
  return csv;
}

}  // namespace

const std::vector<FlagSpec>& LocalPlanFlags() {
  static const std::vector<FlagSpec>* const kFlags =
      new std::vector<FlagSpec>(MakeLocalPlanFlags());
  return *kFlags;
}

std::string PlanUsage() { return Args(LocalPlanSpec()).Help(); }

int RunPlanCommand(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  Args args(LocalPlanSpec());
  if (absl::Status s = args.Parse(argv); !s.ok()) {
    err << "zpipe plan: " << s.message() << "\n";
    return 2;
  }
  if (args.help()) {
    out << args.Help();
    return 0;
  }
  absl::StatusOr<PlanArgs> pa = ParseArgs(args);
  if (!pa.ok()) {
    err << "zpipe plan: " << pa.status().message() << "\n";
    return 2;
  }
  const absl::Status bounds = CheckBounds(*pa);
  absl::StatusOr<std::string> text =
      bounds.ok() ? Render(*pa) : absl::StatusOr<std::string>(bounds);
  if (!text.ok()) {
    err << text.status().message();
    return 2;
  }
  if (pa->output_file.empty()) {
    out << *text;
    return 0;
  }
  std::ofstream file(pa->output_file);
  file << *text;
  if (!file) {
    err << "zpipe plan: --file: cannot write '" << pa->output_file << "'\n";
    return 2;
  }
  return 0;
}

}  // namespace zpipe::cli
