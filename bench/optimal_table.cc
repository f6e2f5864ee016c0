// Prints, for pipeline shapes up to p = 8, m = 32, how far each schedule's plans are from the
// best possible: the greedy pass alone (`zpipe plan --budget 0`, schedule.search_budget 0: the
// published order for 1f1b and zb-h1), the default plan (the search with budget 1 s and seed 1,
// then the polish, PlanRequest::polish: what `zpipe plan` shows and jobs run), and the exact
// solver's (core/optimal_schedule.h, --budget seconds per row) best span with its proven lower
// bound. `opt` says the solver proved its span optimal (the bound is the optimum); otherwise
// `bound` is the best it proved: SpanLowerBound, the per-rank relaxation (core/rank_bound.h), or
// what its tree's passes reached. `pol` says whether the polish shortened the default plan
// (`yes`), ran and found nothing shorter (`no`), or did not run (`-`: more than
// core::kMaxPolishActions compute actions).
//   zpipe_optimal_table [--budget SECONDS] [--comm T] [--costs uniform|skewed]
//                       [--schedule NAME]... [--max-p P] [--models DIR]
//                       [--models-plan default|greedy]
// The gaps are span / bound - 1: how much shorter than that plan any valid plan could be.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/mip_model.h"
#include "core/planning.h"
#include "flags/flags.h"

namespace zpipe {
namespace {

// Uniform stages, or a skewed model (the last stage 30% heavier, as an LM head makes it, and
// W at 60% of B), with the memory deltas of the ZB paper (B frees half of what F holds).
core::PlanInputs Inputs(const core::Placement& pl, bool skewed, double comm) {
  core::PlanInputs in;
  in.cost.comm = comm;
  for (int s = 0; s < pl.num_stages(); ++s) {
    const double heavy = skewed && s == pl.num_stages() - 1 ? 1.3 : 1;
    in.cost.stages.push_back(core::StageCost{.f = 1 * heavy,
                                             .b = (skewed ? 1.1 : 1) * heavy,
                                             .w = (skewed ? 0.66 : 1) * heavy,
                                             .mem_f = 1,
                                             .mem_b = -0.5,
                                             .mem_w = -0.5});
  }
  return in;
}

int Main(int argc, char** argv) {
  double budget = 10, comm = 0.1;
  std::string costs = "uniform";
  std::unique_ptr<CLI::App> app = flags::NewApp(
      "zpipe_optimal_table",
      "zpipe_optimal_table [--budget S] [--comm T] [--costs uniform|skewed] [--schedule NAME]... "
      "[--max-p P]",
      "  the exact solver's span, bound and gap beside the default plan, shape by shape");
  flags::AddNumber(*app, "--budget", &budget, "solver seconds per row (default 10)");
  flags::AddNumber(*app, "--comm", &comm, "T_comm (default 0.1)");
  flags::AddChecked(*app, "--costs", "uniform|skewed", "stage costs (default uniform)",
                    flags::OneOf("uniform skewed"), [&](const std::string& v) { costs = v; });
  std::vector<std::string> only;
  flags::AddList(*app, "--schedule", &only, "NAME",
                 "only this schedule's rows (repeatable; default all six)");
  int max_p = 8;
  flags::AddInteger(*app, "--max-p", &max_p, 2, 8, "only rows of p at most this (default 8)");
  std::string models;
  flags::AddText(*app, "--models", &models, "DIR",
                 "write each row's problem there as JSON, for bench/mip_bound.py");
  std::string models_plan = "default";
  flags::AddChecked(*app, "--models-plan", "default|greedy",
                    "the plan each --models row carries, as the plan in question and the hint of "
                    "bench/mip_bound.py: the default plan (default) or the greedy pass's",
                    flags::OneOf("default greedy"),
                    [&](const std::string& v) { models_plan = v; });
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    return *exit;
  }
  if (!models.empty() && !bench::MakeMipModelFolder(models, "zpipe_optimal_table")) return 2;
  const bool skewed = costs == "skewed";
  const bool greedy_plan = models_plan == "greedy";
  const std::vector<std::pair<int, int>> shapes = {{2, 2}, {2, 4}, {2, 8}, {4, 4},  {4, 8},
                                                   {4, 16}, {8, 8}, {8, 16}, {8, 32}};
  const char* schedules[] = {"1f1b", "zb-h1", "zb-1p", "zb-2p", "zb-v", "v-half"};
  std::printf("costs %s, T_comm %g, solver budget %g s per row\n", skewed ? "skewed" : "uniform",
              comm, budget);
  std::printf("%-7s %2s %3s %9s %9s %4s %9s %9s %4s %8s %8s %10s\n", "sched", "p", "m", "greedy",
              "default", "pol", "solver", "bound", "opt", "grdy_gap", "def_gap", "nodes");
  int rows = 0, within_1pct = 0, greedy_within_1pct = 0, proven = 0;
  int polished_rows = 0, polish_shortened = 0;
  for (const char* schedule : schedules) {
    if (!only.empty() && std::find(only.begin(), only.end(), schedule) == only.end()) continue;
    for (const auto& [p, m] : shapes) {
      if (p > max_p) continue;
      core::PlanRequest req;
      req.schedule = schedule;
      req.pipeline = p;
      req.microbatches = m;
      req.lower = false;
      req.inputs = [skewed, comm](const core::Placement& pl) { return Inputs(pl, skewed, comm); };
      absl::StatusOr<core::PlannedSchedule> greedy = core::PlanSchedule(req);
      req.search = {.budget_seconds = 1, .seed = 1};
      req.optimal = core::OptimalOptions{.time_limit_seconds = budget};
      absl::StatusOr<core::PlannedSchedule> solved = core::PlanSchedule(req);
      if (!greedy.ok() || !solved.ok()) {
        std::printf("%-7s %2d %3d  unavailable: %s\n", schedule, p, m,
                    std::string((greedy.ok() ? solved : greedy).status().message()).c_str());
        continue;
      }
      const core::OptimalResult& o = *solved->optimal;
      const double bound = solved->span_lower_bound;
      const double greedy_gap = greedy->sim.span / bound - 1;
      // The solver's incumbent is the searched plan: the default.
      const double def_gap = o.incumbent_span / bound - 1;
      ++rows;
      within_1pct += def_gap <= 0.01 + 1e-12;
      greedy_within_1pct += greedy_gap <= 0.01 + 1e-12;
      proven += o.optimal;
      const std::optional<core::PlannedSchedule::Polish>& polish = solved->polish;
      polished_rows += polish.has_value();
      polish_shortened += polish.has_value() && polish->improved();
      const char* pol = !polish.has_value() ? "-" : polish->improved() ? "yes" : "no";
      if (!models.empty() &&
          !bench::WriteMipModel(models, greedy_plan ? *greedy : *solved,
                                {.costs = costs,
                                 .schedule = schedule,
                                 .span = greedy_plan ? greedy->sim.span : o.incumbent_span,
                                 .bound = bound,
                                 .optimal = o.optimal})) {
        std::fprintf(stderr, "zpipe_optimal_table: cannot write a model into %s\n",
                     models.c_str());
        return 1;
      }
      std::printf("%-7s %2d %3d %9.4g %9.4g %4s %9.4g %9.4g %4s %7.2f%% %7.2f%% %10lld\n", schedule,
                  p, m, greedy->sim.span, o.incumbent_span, pol, o.span, bound,
                  o.optimal ? "yes" : "no", 100 * greedy_gap, 100 * def_gap,
                  static_cast<long long>(o.nodes));
    }
  }
  std::printf(
      "%d rows: optimum proven on %d; default plan (search and polish) within 1%% of the bound "
      "on %d, the greedy pass on %d\n",
      rows, proven, within_1pct, greedy_within_1pct);
  std::printf("the polish ran on %d rows and shortened the default plan on %d\n", polished_rows,
              polish_shortened);
  return 0;
}

}  // namespace
}  // namespace zpipe

int main(int argc, char** argv) { return zpipe::Main(argc, argv); }
