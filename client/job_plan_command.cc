// `zpipe plan --job ID`: the plan the coordinator made for a job, with its predicted statistics.
// (`zpipe plan` without --job generates a plan locally: plan_command.cc.)
#include <limits>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"
#include "core/recompute.h"

namespace zpipe::cli {
namespace {

// The table's `plan` as the job's plan sees it: only --job and --rank (the other flags are the
// local plan's, plan_command.cc).
CommandSpec JobPlanSpec() {
  CommandSpec spec = *FindCommand("plan");
  std::erase_if(spec.flags,
                [](const FlagSpec& f) { return f.name != "--job" && f.name != "--rank"; });
  spec.synopsis = "plan --job ID [--rank R]";
  spec.description =
      "prints the job's plan (core's text form) after its predicted statistics;\n"
      "--rank R shows only pipeline rank R";
  return spec;
}

}  // namespace

void PrintModelLayout(std::ostream& out, const v1::ModelLayout& layout) {
  if (layout.source().empty()) return;
  std::string cuts;
  for (int c : layout.cuts()) absl::StrAppend(&cuts, cuts.empty() ? "" : ",", c);
  const char* why = layout.source() == "measured"     ? "balanced by measured block costs"
                    : layout.source() == "checkpoint" ? "kept from the checkpoint resumed"
                                                      : "from the spec";
  out << "model cuts: [" << cuts << "] (" << why << ")\n";
  if (layout.stages().empty()) return;
  Table t({"STAGE", "BLOCKS", "F ms", "B ms", "W ms"});
  for (const v1::StageLayout& s : layout.stages()) {
    t.Add({absl::StrCat(s.stage()), absl::StrCat(s.first_block(), "..", s.end_block() - 1),
           absl::StrFormat("%.2f", s.forward_ms()), absl::StrFormat("%.2f", s.backward_ms()),
           absl::StrFormat("%.2f", s.weight_ms())});
  }
  t.Print(out);
}

int RunJobPlanCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args(JobPlanSpec());
  if (std::optional<int> exit = ParseCommandArgs(ctx, "plan", args, argv)) return *exit;
  if (!args.positionals().empty() || args.Get("--job").empty()) {
    return ctx.Usage("plan", "expected --job ID");
  }
  int only_rank = -1;
  if (args.Has("--rank")) {
    absl::StatusOr<int64_t> rank = args.Integer("--rank", 0, std::numeric_limits<int>::max());
    if (!rank.ok()) return ctx.Usage("plan", rank.status().message());
    only_rank = static_cast<int>(*rank);
  }
  absl::StatusOr<JobPlan> plan = ctx.client().Plan(args.Get("--job"));
  if (!plan.ok()) return ctx.Fail("plan", plan.status());
  const core::Plan& p = plan->plan;
  if (only_rank >= p.num_ranks()) {
    return ctx.Usage(
        "plan", absl::StrCat("--rank ", only_rank, ": the plan has ", p.num_ranks(), " ranks"));
  }

  if (ctx.json()) {
    Json out;
    out["job_id"] = plan->job_id;
    out["schedule"] = p.schedule;
    out["ranks"] = p.num_ranks();
    out["stages"] = p.num_stages();
    out["microbatches"] = p.num_microbatches;
    out["predicted"] = MessageJson(plan->predicted);
    out["layout"] = plan->layout.source().empty() ? Json() : MessageJson(plan->layout);
    out["recomputed_stages"] = core::StageIndices(core::RecomputedStages(p));
    Json actions = Json::array();
    for (int r = 0; r < p.num_ranks(); ++r) {
      if (only_rank >= 0 && r != only_rank) continue;
      Json rank = {{"rank", r}, {"actions", Json::array()}};
      for (const core::Action& a : p.ranks[r]) rank["actions"].push_back(core::ActionToString(a));
      actions.push_back(std::move(rank));
    }
    out["plan"] = std::move(actions);
    PrintDocument(ctx, out);
    return kExitOk;
  }

  const v1::PlanStats& s = plan->predicted;
  ctx.out() << absl::StrFormat(
      "job %s: %s, %d ranks, %d stages, %d microbatches, %d actions%s\n", plan->job_id, p.schedule,
      p.num_ranks(), p.num_stages(), p.num_microbatches, static_cast<int>(p.num_actions()),
      plan->plan_version > 0
          ? absl::StrCat(", plan v", plan->plan_version, " (re-planned from measured costs)")
          : "");
  ctx.out() << absl::StrFormat(
      "predicted: span %.2f ms, makespan %.2f ms, bubble %.1f%%, reduce overlap %.1f%% (exposed "
      "%.2f ms)\n",
      s.span_ms(), s.makespan_ms(), s.bubble_rate() * 100, s.reduce_overlap() * 100,
      s.exposed_reduce_ms());
  Table t({"RANK", "ACTIONS", "BUBBLE", "PEAK MEM", "LIMIT"});
  for (int r = 0; r < p.num_ranks(); ++r) {
    t.Add({absl::StrCat(r), absl::StrCat(p.ranks[r].size()),
           r < s.rank_bubble_size() ? absl::StrFormat("%.1f%%", s.rank_bubble(r) * 100) : "-",
           r < s.peak_memory_size() ? absl::StrFormat("%.2f", s.peak_memory(r)) : "-",
           absl::StrFormat("%.2f", s.memory_limit())});
  }
  t.Print(ctx.out());
  if (const std::vector<int> recomputed = core::StageIndices(core::RecomputedStages(p));
      !recomputed.empty()) {
    ctx.out() << "recompute: stages " << absl::StrJoin(recomputed, ",") << " of " << p.num_stages()
              << " run their forwards again before B (R actions)\n";
  }
  PrintModelLayout(ctx.out(), plan->layout);
  for (int r = 0; r < p.num_ranks(); ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    ctx.out() << "\nrank " << r << "\n";
    for (const core::Action& a : p.ranks[r]) ctx.out() << core::ActionToString(a) << "\n";
  }
  return kExitOk;
}

}  // namespace zpipe::cli
