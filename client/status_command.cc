// `zpipe status ID`: one job's record.
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/command_table.h"
#include "client/json_output.h"

namespace zpipe::cli {
namespace {

std::string ModelLine(const v1::JobSpec& spec) {
  if (spec.model().has_gpt()) {
    const v1::GptModel& g = spec.model().gpt();
    return absl::StrFormat("gpt layers=%d hidden=%d heads=%d seq_len=%d vocab=%d", g.layers(),
                           g.hidden(), g.heads(), g.seq_len(), g.vocab());
  }
  if (spec.model().has_synthetic()) {
    const v1::SyntheticModel& s = spec.model().synthetic();
    return absl::StrFormat("synthetic F=%gms B=%gms W=%gms", s.forward_ms(), s.backward_ms(),
                           s.weight_ms());
  }
  return "-";
}

// The job's record, one field per line.
void PrintSummary(std::ostream& out, const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  const int d = std::max(1, spec.parallel().data());
  Table t({"job", job.id()});
  t.Add({"name", spec.name()});
  if (!spec.labels().empty()) t.Add({"labels", FormatLabels(spec)});
  t.Add({"state", JobStateName(job.state())});
  if (!job.reason().empty()) t.Add({"reason", job.reason()});
  if (job.state() == v1::JOB_STATE_PENDING) t.Add({"queue", absl::StrCat(job.queue_position())});
  t.Add({"model", ModelLine(spec)});
  t.Add({"schedule", absl::StrFormat("%s p=%d d=%d m=%d", spec.schedule().kind(),
                                     spec.parallel().pipeline(), d, spec.batch().microbatches())});
  const v1::JobProgress& p = job.progress();
  t.Add({"iterations", absl::StrCat(p.iterations_done(), "/", spec.train().iterations())});
  t.Add({"created", FormatTime(job.create_time().seconds())});
  if (job.has_start_time()) t.Add({"started", FormatTime(job.start_time().seconds())});
  if (job.has_end_time()) t.Add({"ended", FormatTime(job.end_time().seconds())});
  if (job.has_predicted()) {
    t.Add({"predicted", absl::StrFormat("span %.1f ms, makespan %.1f ms, bubble %.1f%%",
                                        job.predicted().span_ms(), job.predicted().makespan_ms(),
                                        job.predicted().bubble_rate() * 100)});
  }
  if (spec.schedule().replan_every() > 0 || job.plan_version() > 0) {
    t.Add({"plan", absl::StrCat("v", job.plan_version(),
                                spec.schedule().replan_every() > 0
                                    ? absl::StrCat(" (re-planned from measured costs every ",
                                                   spec.schedule().replan_every(), " iterations)")
                                    : "")});
  }
  if (spec.restart().max_restarts() > 0 || job.restarts() > 0) {
    t.Add({"restarts",
           absl::StrCat(job.restarts(), " of ", spec.restart().max_restarts(), " (backoff ",
                        spec.restart().backoff().empty() ? "2s" : spec.restart().backoff(), ")")});
  }
  if (job.has_latest_summary()) {
    const v1::IterationSummary& s = job.latest_summary();
    std::string line = absl::StrFormat("iteration %d: %s, bubble %.1f%%", s.iteration() + 1,
                                       FormatDuration(s.duration_s()), s.bubble_rate() * 100);
    if (s.has_loss()) absl::StrAppend(&line, absl::StrFormat(", loss %.4f", s.loss()));
    if (!s.has_loss() && spec.model().has_synthetic())
      absl::StrAppend(&line, ", no loss (synthetic)");
    t.Add({"measured", line});
  }
  t.Print(out);
}

// Each rank's worker and its F/B/W progress.
void PrintRanks(std::ostream& out, const v1::Job& job) {
  const v1::JobProgress& p = job.progress();
  if (job.ranks_size() == 0) return;
  out << "\n";
  Table ranks({"RANK", "DP", "WORKER", "HOST", "F", "B", "W"});
  for (const v1::RankAssignment& r : job.ranks()) {
    std::string f = "-", b = "-", w = "-";
    for (const v1::RankProgress& rp : p.ranks()) {
      if (rp.pipeline_rank() != r.pipeline_rank() || rp.data_rank() != r.data_rank()) continue;
      f = absl::StrCat(rp.forward_done(), "/", rp.forward_total());
      b = absl::StrCat(rp.backward_done(), "/", rp.backward_total());
      w = absl::StrCat(rp.weight_done(), "/", rp.weight_total());
    }
    ranks.Add({absl::StrCat(r.pipeline_rank()), absl::StrCat(r.data_rank()), r.worker_name(),
               r.host(), f, b, w});
  }
  ranks.Print(out);
}

// After a restart: where each attempt resumed and how far it got; the gap is work run again.
void PrintAttempts(std::ostream& out, const v1::Job& job) {
  if (job.attempts_size() <= 1) return;
  out << "\n";
  Table attempts({"ATTEMPT", "WORKERS", "STARTED", "FROM", "TO", "ENDED"});
  for (const v1::JobAttempt& a : job.attempts()) {
    const bool open = !a.has_end_time();
    attempts.Add({absl::StrCat(a.attempt()), absl::StrJoin(a.workers(), ","),
                  FormatTime(a.start_time().seconds()),
                  a.start_iteration() < 0 ? "-" : absl::StrCat(a.start_iteration()),
                  open ? "-" : absl::StrCat(a.iterations_done()),
                  open ? "running" : a.end_reason()});
  }
  attempts.Print(out);
}

}  // namespace

int RunStatusCommand(CliContext& ctx, const std::vector<std::string>& argv) {
  Args args = ArgsFor("status");
  if (std::optional<int> exit = ParseCommandArgs(ctx, "status", args, argv)) return *exit;
  if (args.positionals().size() != 1) return ctx.Usage("status", "expected one job id");
  absl::StatusOr<v1::Job> job = ctx.client().Get(args.positionals()[0]);
  if (!job.ok()) return ctx.Fail("status", job.status());
  if (ctx.json()) {
    PrintDocument(ctx, JobJson(*job));
    return kExitOk;
  }
  if (ctx.names()) {
    ctx.out() << job->id() << "\n";
    return kExitOk;
  }
  PrintSummary(ctx.out(), *job);
  PrintRanks(ctx.out(), *job);
  PrintAttempts(ctx.out(), *job);
  return kExitOk;
}

}  // namespace zpipe::cli
