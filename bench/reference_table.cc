// Prints our ZB-1p, ZB-2p and ZB-V bubble rates (greedy pass, and search with a budget) beside
// the reference generator's of the ZB paper on the random shapes of
// bench/reference_schedules.tsv (see bench/reference_schedules.py for how they were made and how
// its numbers are converted), with the gap to core's lower bound, and a summary line. Where our
// plan is not strictly shorter, `ref_opt` says whether the per-rank relaxation
// (core/rank_bound.h) proves the reference's span optimal ("yes": nothing could beat it) or not
// ("?": the row is open), within --prove-nodes nodes (0: not tried, "-"). --models DIR writes each
// open row's problem there (bench/mip_model.h), with the reference's span as the span in
// question, for bench/mip_bound.py.
//   zpipe_reference_table [--budget SECONDS] [--seed N] [--data PATH] [--limit ROWS] [--kind KIND]
//                         [--prove-nodes N] [--models DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/mip_model.h"
#include "bench/reference_rows.h"
#include "core/planning.h"
#include "core/rank_bound.h"
#include "flags/flags.h"

namespace zpipe {
namespace {

using Row = bench::ReferenceRow;

absl::StatusOr<core::PlannedSchedule> Plan(const Row& row, double budget, uint64_t seed) {
  return bench::PlanReferenceRow(row, budget, seed);
}

int Main(int argc, char** argv) {
  double budget = 1;
  uint64_t seed = 1;
  size_t limit = 0;
  std::string only_kind;  // empty: every kind
  int64_t prove_nodes = 2'000'000;
  std::string data = bench::DefaultReferenceData();
  std::unique_ptr<CLI::App> app = flags::NewApp(
      "zpipe_reference_table",
      "zpipe_reference_table [--budget S] [--seed N] [--data FILE] [--limit N] [--kind KIND]",
      "  our schedules against the ZB paper's reference generator (bench/reference_schedules.tsv)");
  flags::AddNumber(*app, "--budget", &budget, "search seconds per row (default 1)");
  flags::AddInteger(*app, "--seed", &seed, 0, std::numeric_limits<int64_t>::max(),
                    "search seed (default 1)");
  flags::AddText(*app, "--data", &data, "FILE", "the reference rows");
  flags::AddInteger(*app, "--limit", &limit, 0, std::numeric_limits<int64_t>::max(),
                    "only the first N rows (default all)");
  flags::AddText(*app, "--kind", &only_kind, "KIND", "only rows of this kind (zb-1p, zb-2p, zb-v)");
  flags::AddInteger(*app, "--prove-nodes", &prove_nodes, 0, std::numeric_limits<int64_t>::max(),
                    "per-rank relaxation nodes per row where ours is not shorter (default "
                    "2000000; 0 = do not try)");
  std::string models;
  flags::AddText(*app, "--models", &models, "DIR",
                 "write each open row's problem there as JSON, for bench/mip_bound.py");
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    return *exit;
  }
  if (!models.empty() && !bench::MakeMipModelFolder(models, "zpipe_reference_table")) return 2;
  std::vector<Row> rows = bench::ReadReferenceRows(data);
  if (rows.empty()) {
    std::fprintf(stderr, "no rows in %s\n", data.c_str());
    return 1;
  }
  if (!only_kind.empty()) {
    std::erase_if(rows, [&](const Row& row) { return row.kind != only_kind; });
    if (rows.empty()) {
      std::fprintf(stderr, "no rows of kind %s in %s (kinds: zb-1p, zb-2p, zb-v)\n",
                   only_kind.c_str(), data.c_str());
      return 1;
    }
  }
  if (limit > 0 && rows.size() > limit) rows.resize(limit);
  std::printf(
      "search budget %g s per plan, seed %llu; bubble rates; bound = the bubble at core's "
      "span lower bound\n",
      budget, static_cast<unsigned long long>(seed));
  std::printf("%-6s %3s %4s %9s %9s %9s %10s %9s %9s %9s %7s\n", "kind", "p", "m", "reference",
              "greedy", "search", "vs_ref", "bound", "gap", "search_s", "ref_opt");
  int worse = 0, better = 0, failed = 0, ref_optimal = 0;
  std::map<std::string, std::pair<int, int>> per_kind;  // kind -> (strictly better, shapes)
  double total_s = 0;
  for (const Row& row : rows) {
    const int v = row.kind == "zb-v" ? 2 : 1;
    const double ref = 1 - v * row.m * (row.f + row.b + row.w) / row.span;
    absl::StatusOr<core::PlannedSchedule> greedy = Plan(row, 0, seed);
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<core::PlannedSchedule> search = Plan(row, budget, seed);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += secs;
    if (!greedy.ok() || !search.ok()) {
      ++failed;
      std::printf("%-6s %3d %4d  failed: %s\n", row.kind.c_str(), row.p, row.m,
                  std::string((greedy.ok() ? search : greedy).status().message()).c_str());
      continue;
    }
    const double ours = search->sim.bubble_rate;
    const double delta = ours - ref;
    if (delta > 1e-4) ++worse;
    ++per_kind[row.kind].second;
    const bool shorter = search->sim.span < row.span * (1 - 1e-9);
    if (shorter) ++better, ++per_kind[row.kind].first;
    // Not shorter: is the reference's span optimal (then nothing could be shorter)?
    const char* ref_opt = "-";
    if (!shorter && prove_nodes > 0) {
      const core::RankBound ranks = core::RankRelaxationBound(
          search->plan.placement, row.m, search->cost, search->memory_limit,
          /*split_backward=*/true, {.upper = row.span, .node_limit = prove_nodes});
      const double bound = std::max(search->span_lower_bound, ranks.span);
      const bool proven = bound >= row.span * (1 - 1e-9);
      ref_optimal += proven;
      ref_opt = proven ? "yes" : "?";
      if (!proven && !models.empty() &&
          !bench::WriteMipModel(models, *search,
                                {.costs = "reference",
                                 .schedule = row.kind,
                                 .span = row.span,
                                 .bound = bound,
                                 .optimal = false},
                                "-row" + std::to_string(&row - rows.data() + 1))) {
        std::fprintf(stderr, "zpipe_reference_table: cannot write a model into %s\n",
                     models.c_str());
        return 1;
      }
    }
    std::printf("%-6s %3d %4d %9.4f %9.4f %9.4f %+10.5f %9.4f %9.4f %9.2f %7s\n",
                row.kind.c_str(), row.p, row.m, ref, greedy->sim.bubble_rate, ours, delta,
                search->bubble_lower_bound, ours - search->bubble_lower_bound, secs, ref_opt);
  }
  std::printf(
      "\n%zu shapes: %d worse than the reference by more than 1e-4, %d strictly better "
      "(shorter span), %d failed; search took %.1f s in all\n",
      rows.size(), worse, better, failed, total_s);
  if (prove_nodes > 0) {
    std::printf(
        "not strictly better on %d: the reference's span proven optimal on %d of them (span "
        "lower bound or per-rank relaxation), open on %d\n",
        static_cast<int>(rows.size()) - better - failed, ref_optimal,
        static_cast<int>(rows.size()) - better - failed - ref_optimal);
  }
  std::printf("strictly better per kind:");
  for (const auto& [kind, counts] : per_kind) {
    std::printf(" %s %d of %d;", kind.c_str(), counts.first, counts.second);
  }
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace zpipe

int main(int argc, char** argv) { return zpipe::Main(argc, argv); }
