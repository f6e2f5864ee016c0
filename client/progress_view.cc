// Following a job: `zpipe watch` and `zpipe submit --wait/--follow`.
//
// On a terminal the view redraws a small block in place: a header line (state, iteration, loss,
// bubble measured vs predicted) and one row per rank with F/B/W bars for the current iteration.
// Elsewhere (pipes, files, CI logs) it prints one plain line per state change and per completed
// iteration, which is what log readers and tests want. With -o json every event is one JSON line.
// Reasons and errors in events come from the coordinator and workers: text output shows them
// through util::SanitizeForTerminal.
#include <algorithm>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/json_output.h"
#include "util/sanitize.h"

namespace zpipe::cli {
namespace {

constexpr int kMaxRanksShown = 32;
constexpr int kBarWidth = 12;

std::string Bar(int done, int total) {
  const int filled = total > 0 ? std::clamp(done * kBarWidth / total, 0, kBarWidth) : 0;
  return absl::StrCat("[", std::string(filled, '#'), std::string(kBarWidth - filled, '.'), "]");
}

std::string Percent(double ratio) { return absl::StrFormat("%.1f%%", ratio * 100); }

// "(predicted 17.8% at measured costs, planned 3.9%)": the plan re-simulated at the costs the
// workers measured, beside what the plan's cost model said; "(predicted 3.9%)" when the
// coordinator could not re-simulate it.
std::string PredictedBubble(const v1::IterationSummary& it) {
  if (!it.has_predicted_bubble_measured_costs()) {
    return absl::StrCat("(predicted ", Percent(it.predicted_bubble_rate()), ")");
  }
  return absl::StrCat("(predicted ", Percent(it.predicted_bubble_measured_costs()),
                      " at measured costs, planned ", Percent(it.predicted_bubble_rate()), ")");
}

std::string IterationLine(const v1::IterationSummary& it, int total) {
  std::string line = absl::StrCat("iteration ", it.iteration() + 1);
  if (total > 0) absl::StrAppend(&line, "/", total);
  absl::StrAppend(&line, ": ", FormatDuration(it.duration_s()));
  if (it.has_loss()) absl::StrAppend(&line, absl::StrFormat("  loss %.4f", it.loss()));
  if (it.has_eval_loss()) absl::StrAppend(&line, absl::StrFormat("  eval %.4f", it.eval_loss()));
  absl::StrAppend(&line, "  bubble ", Percent(it.bubble_rate()), " ", PredictedBubble(it));
  if (it.reduce_total_s() > 0) {
    absl::StrAppend(&line, "  exposed reduce ", FormatDuration(it.reduce_exposed_s()), " of ",
                    FormatDuration(it.reduce_total_s()));
  }
  double stall_s = 0;
  for (const v1::RankIterationStats& r : it.ranks())
    stall_s = std::max(stall_s, r.checkpoint_stall_s());
  if (stall_s > 0)
    absl::StrAppend(&line, absl::StrFormat("  checkpoint stall %.1fms", stall_s * 1e3));
  // Skipped checkpoint writes (checkpoint.on_error: skip), one line per rank that had one.
  for (const v1::RankIterationStats& r : it.ranks()) {
    if (r.checkpoint_error().empty()) continue;
    absl::StrAppend(&line, "\n  checkpoint skipped on rank ", r.pipeline_rank(), "/", r.data_rank(),
                    ": ", util::SanitizeForTerminal(r.checkpoint_error()));
  }
  return line;
}

// "JOB plan v0 -> v1 applied at iteration 15: predicted bubble 21.3% -> 12.0% (...)".
std::string PlanSwitchLine(const std::string& job_id, const v1::PlanSwitch& s) {
  absl::string_view phase = "scheduled for";
  if (s.phase() == v1::PlanSwitch::PHASE_APPLIED) phase = "applied at";
  if (s.phase() == v1::PlanSwitch::PHASE_ABANDONED) phase = "abandoned at";
  return absl::StrCat(job_id, " plan v", s.from_version(), " -> v", s.to_version(), " ", phase,
                      " iteration ", s.switch_iteration() + 1, ": predicted bubble ",
                      Percent(s.old_predicted_bubble()), " -> ", Percent(s.new_predicted_bubble()),
                      s.reason().empty()
                          ? ""
                          : absl::StrCat(" (", util::SanitizeForTerminal(s.reason()), ")"));
}

class JobView {
 public:
  JobView(CliContext& ctx, std::string job_id, bool live, bool quiet)
      : ctx_(ctx), job_id_(std::move(job_id)), live_(live), quiet_(quiet) {}

  void OnEvent(const v1::JobEvent& event) {
    if (ctx_.json() && !quiet_) {
      PrintDocument(ctx_, EventJson(event), /*stream=*/true);
      ctx_.out() << std::flush;
      return;
    }
    switch (event.kind_case()) {
      case v1::JobEvent::kSnapshot:
        job_ = event.snapshot();
        have_job_ = true;
        Line(JobLine(job_));
        break;
      case v1::JobEvent::kStateChange: {
        const v1::StateChange& c = event.state_change();
        job_.set_state(c.to());
        Line(absl::StrCat(job_id_, " ", JobStateName(c.from()), " -> ", JobStateName(c.to()),
                          c.reason().empty()
                              ? ""
                              : absl::StrCat(": ", util::SanitizeForTerminal(c.reason()))));
        break;
      }
      case v1::JobEvent::kIteration:
        *job_.mutable_latest_summary() = event.iteration();
        Line(IterationLine(event.iteration(), job_.spec().train().iterations()));
        break;
      case v1::JobEvent::kPlanSwitch:
        Line(PlanSwitchLine(job_id_, event.plan_switch()));
        break;
      case v1::JobEvent::kProgress:
        *job_.mutable_progress() = event.progress();
        if (live_) Redraw();
        break;
      default:
        break;
    }
  }

  // Erases the live block so the final lines print cleanly.
  void Finish() { Erase(); }

 private:
  // A permanent line: printed above the live block (plain mode: just printed).
  void Line(const std::string& line) {
    if (quiet_) return;
    Erase();
    ctx_.out() << line << "\n";
    if (live_) Redraw();
    ctx_.out() << std::flush;
  }

  void Erase() {
    if (drawn_lines_ > 0) ctx_.out() << "\x1b[" << drawn_lines_ << "A\x1b[J";
    drawn_lines_ = 0;
  }

  void Redraw() {
    if (quiet_) return;
    Erase();
    std::ostringstream block;
    const v1::JobProgress& p = job_.progress();
    block << "  " << JobStateName(job_.state()) << "  iteration " << p.iteration() + 1 << "/"
          << p.iterations_total();
    if (job_.has_latest_summary()) {
      const v1::IterationSummary& s = job_.latest_summary();
      if (s.has_loss()) block << absl::StrFormat("  loss %.4f", s.loss());
      if (s.has_eval_loss()) block << absl::StrFormat("  eval %.4f", s.eval_loss());
      block << "  bubble " << Percent(s.bubble_rate()) << " " << PredictedBubble(s);
    } else if (job_.has_predicted()) {
      block << "  predicted bubble " << Percent(job_.predicted().bubble_rate());
    }
    block << "\n";
    int lines = 1;
    int shown = 0;
    for (const v1::RankProgress& r : p.ranks()) {
      if (shown++ == kMaxRanksShown) {
        block << "  ... " << p.ranks_size() - kMaxRanksShown << " more ranks\n";
        ++lines;
        break;
      }
      block << absl::StrFormat(
          "  rank %2d/%-2d F %s %3d/%-3d B %s %3d/%-3d W %s %3d/%-3d\n", r.pipeline_rank(),
          r.data_rank(), Bar(r.forward_done(), r.forward_total()), r.forward_done(),
          r.forward_total(), Bar(r.backward_done(), r.backward_total()), r.backward_done(),
          r.backward_total(), Bar(r.weight_done(), r.weight_total()), r.weight_done(),
          r.weight_total());
      ++lines;
    }
    ctx_.out() << block.str() << std::flush;
    drawn_lines_ = lines;
  }

  CliContext& ctx_;
  const std::string job_id_;
  const bool live_;
  const bool quiet_;
  v1::Job job_;
  bool have_job_ = false;
  int drawn_lines_ = 0;
};

}  // namespace

int FollowJob(CliContext& ctx, const std::string& command, const std::string& job_id, bool live,
              bool quiet, const std::function<void(const v1::JobEvent&)>& observer) {
  quiet = quiet || ctx.names();  // -o name: only the id, which the caller printed
  live = live && !ctx.json() && !quiet;
  JobView view(ctx, job_id, live, quiet);
  WatchOptions options;
  options.progress_interval_ms = live ? 200 : 1000;
  absl::Status status = ctx.client().Watch(job_id, options, [&](const v1::JobEvent& event) {
    if (observer) observer(event);
    view.OnEvent(event);
    return true;
  });
  view.Finish();
  if (!status.ok()) return ctx.Fail(command, status);
  absl::StatusOr<v1::Job> job = ctx.client().Get(job_id);
  if (!job.ok()) return ctx.Fail(command, job.status());
  if (ctx.json()) {
    if (quiet) PrintDocument(ctx, JobJson(*job));
  } else if (!ctx.names()) {  // -o name: the caller printed the id
    std::string line = JobLine(*job);
    if (job->has_start_time() && job->has_end_time()) {
      absl::StrAppend(&line, " (ran ",
                      FormatDuration(job->end_time().seconds() - job->start_time().seconds()), ")");
    }
    ctx.out() << line << "\n";
  }
  ctx.out() << std::flush;
  if (!IsTerminal(job->state())) {
    ctx.err() << "zpipe " << command << ": the event stream ended before job " << job_id
              << " finished\n";
    return kExitJobFailed;
  }
  return job->state() == v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitJobFailed;
}

}  // namespace zpipe::cli
