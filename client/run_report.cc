#include "client/run_report.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "util/sanitize.h"

namespace zpipe::cli {
namespace {

std::string Pct(double r) { return absl::StrFormat("%.1f%%", r * 100); }
// "+ 0.6%", "- 0.2%": a share added to or taken from the planned bubble.
std::string SignedPct(double r) {
  return absl::StrFormat("%s %.1f%%", r < 0 ? "-" : "+", std::abs(r) * 100);
}

std::string Seconds(double s) {
  if (s < 1) return absl::StrFormat("%.1f ms", s * 1000);
  return absl::StrFormat("%.2f s", s);
}

// The job line and what the run produced: loss, layout, model file, evaluations.
void PrintOutcome(std::ostream& out, const RunSummary& s) {
  out << absl::StrFormat("job %s %s: %s, p=%d d=%d m=%d, %d iterations", s.job_id, s.state,
                         s.schedule, s.pipeline, s.data, s.microbatches, s.iterations);
  if (s.wall_s > 0) out << absl::StrFormat(" in %.1f s", s.wall_s);
  out << "\n";
  if (s.loss_first.has_value()) {
    out << absl::StrFormat("  loss          %.4f -> %.4f\n", *s.loss_first, *s.loss_last);
  } else if (s.synthetic) {
    out << "  loss          none (a synthetic model computes no loss)\n";
  }
  if (!s.layout.source().empty()) {
    std::string cuts;
    for (int c : s.layout.cuts()) absl::StrAppend(&cuts, cuts.empty() ? "" : ",", c);
    out << "  cuts          [" << cuts << "] (" << util::SanitizeForTerminal(s.layout.source())
        << ")";
    if (!s.layout.stages().empty()) {
      out << "; per stage F/B/W ms:";
      for (const v1::StageLayout& st : s.layout.stages()) {
        out << absl::StrFormat(" %.1f/%.1f/%.1f", st.forward_ms(), st.backward_ms(),
                               st.weight_ms());
      }
    }
    out << "\n";
  }
  if (!s.model_file.empty()) out << "  model         " << s.model_file << "\n";
  if (!s.model_error.empty()) out << "  model         not exported: " << s.model_error << "\n";
  if (!s.eval_losses.empty()) {
    out << absl::StrFormat("  eval loss     %.4f -> %.4f (%d evaluations)\n",
                           s.eval_losses.front().second, s.eval_losses.back().second,
                           static_cast<int>(s.eval_losses.size()));
  }
}

// The steady iterations' time, throughput, bubble and reductions.
void PrintTimings(std::ostream& out, const RunSummary& s) {
  out << absl::StrFormat("  iteration     %s (median of iterations %d..%d)\n",
                         Seconds(s.iteration_s), s.iterations - s.steady_iterations + 1,
                         s.iterations);
  if (s.tokens_per_s > 0) out << absl::StrFormat("  throughput    %.0f tokens/s\n", s.tokens_per_s);
  if (s.bubble_predicted_measured_costs) {
    out << absl::StrFormat(
        "  bubble        %s measured, %s predicted at measured costs (%s planned)\n",
        Pct(s.bubble_measured), Pct(*s.bubble_predicted_measured_costs), Pct(s.bubble_predicted));
  } else {
    out << absl::StrFormat("  bubble        %s measured, %s predicted\n", Pct(s.bubble_measured),
                           Pct(s.bubble_predicted));
  }
  if (s.cores > 0 && s.local_threads > s.cores) {
    out << absl::StrFormat(
        "                (%d compute threads share %d cores here: ranks also wait for a core, "
        "which the measured bubble counts)\n",
        s.local_threads, s.cores);
  }
  if (s.reduce_overlap.has_value()) {
    out << absl::StrFormat(
        "  reduce        %s per iteration (all ranks), overlap %s (predicted %s), exposed %s\n",
        Seconds(s.reduce_total_s), Pct(*s.reduce_overlap), Pct(s.reduce_overlap_predicted),
        Seconds(s.reduce_exposed_s));
  }
}

// What the traced iteration tells: where its bubble came from, and replica drift.
void PrintTraceFindings(std::ostream& out, const TimelineFiles& timeline) {
  if (timeline.bubble.has_value()) {
    const BubbleAttribution& b = *timeline.bubble;
    out << absl::StrFormat(
        "  bubble split  iteration %d: %s = %s planned %s actions running long %s hand-overs "
        "and runtime\n",
        timeline.iteration + 1, Pct(b.measured), Pct(b.predicted), SignedPct(b.actions()),
        SignedPct(b.runtime()));
  } else if (!timeline.bubble_error.empty()) {
    out << "  bubble split  not computed: " << util::SanitizeForTerminal(timeline.bubble_error)
        << "\n";
  }
  if (timeline.exposure.has_value() && timeline.exposure->exposed_s > 0) {
    out << absl::StrFormat(
        "  drift         iteration %d: %s of its %s exposed reduce waited for a slower replica\n",
        timeline.iteration + 1, Seconds(timeline.exposure->replica_wait_s),
        Seconds(timeline.exposure->exposed_s));
  }
}

// Per rank; reduce columns only when something was reduced (d > 1), step columns only when an
// optimizer stepped (not for synthetic models), the overlapped one only when a bucket was
// stepped during the iteration.
void PrintRankTable(std::ostream& out, const RunSummary& s) {
  const bool reduced = s.reduce_overlap.has_value();
  bool stepped = false, overlapped = false;
  for (const RankSummary& r : s.ranks) {
    stepped = stepped || r.step_s > 0 || r.overlapped_step_s > 0;
    overlapped = overlapped || r.overlapped_step_s > 0;
  }
  std::vector<std::string> header = {"RANK", "DP", "BUSY", "BUBBLE", "PREDICTED"};
  if (reduced) header.insert(header.end(), {"REDUCE", "EXPOSED"});
  if (stepped) header.push_back("STEP");
  if (overlapped) header.push_back("STEP OVERLAPPED");
  Table t(header);
  for (const RankSummary& r : s.ranks) {
    const double per_iter = s.steady_iterations > 0 ? 1.0 / s.steady_iterations : 0;
    std::vector<std::string> row = {absl::StrCat(r.pipeline_rank), absl::StrCat(r.data_rank),
                                    Seconds(r.busy_s), Pct(r.bubble_measured),
                                    Pct(r.bubble_predicted)};
    if (reduced) {
      row.insert(row.end(),
                 {Seconds(r.reduce_s * per_iter), Seconds(r.exposed_reduce_s * per_iter)});
    }
    if (stepped) row.push_back(Seconds(r.step_s));
    if (overlapped) row.push_back(Seconds(r.overlapped_step_s));
    t.Add(row);
  }
  std::ostringstream table;
  t.Print(table);
  std::istringstream lines(table.str());
  for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
}

}  // namespace

void PrintSummary(std::ostream& out, const RunSummary& s, const TimelineFiles& timeline) {
  out << "\n";
  PrintOutcome(out, s);
  if (s.steady_iterations == 0) return;
  PrintTimings(out, s);
  PrintTraceFindings(out, timeline);
  PrintRankTable(out, s);
  if (!timeline.chrome.empty()) {
    out << "  timeline      iteration " << timeline.iteration + 1 << ": " << timeline.chrome
        << " (Perfetto), " << timeline.svg << "\n";
  } else if (!timeline.error.empty()) {
    out << "  timeline      not written: " << util::SanitizeForTerminal(timeline.error) << "\n";
  }
}

namespace {

nlohmann::json RanksJson(const RunSummary& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSummary& r : s.ranks) {
    ranks.push_back({{"pipeline_rank", r.pipeline_rank},
                     {"data_rank", r.data_rank},
                     {"busy_s", r.busy_s},
                     {"bubble_measured", r.bubble_measured},
                     {"bubble_predicted", r.bubble_predicted},
                     {"reduce_s", r.reduce_s},
                     {"exposed_reduce_s", r.exposed_reduce_s},
                     {"step_s", r.step_s},
                     {"overlapped_step_s", r.overlapped_step_s}});
  }
  return ranks;
}

nlohmann::json LayoutJson(const v1::ModelLayout& layout) {
  nlohmann::json j = {{"source", layout.source()},
                      {"cuts", nlohmann::json::array()},
                      {"stages", nlohmann::json::array()}};
  for (int c : layout.cuts()) j["cuts"].push_back(c);
  for (const v1::StageLayout& st : layout.stages()) {
    j["stages"].push_back({{"stage", st.stage()},
                           {"first_block", st.first_block()},
                           {"end_block", st.end_block()},
                           {"forward_ms", st.forward_ms()},
                           {"backward_ms", st.backward_ms()},
                           {"weight_ms", st.weight_ms()}});
  }
  return j;
}

// The traced iteration's findings, under "bubble" and "reduce" of `j`.
void AddTraceFindings(const TimelineFiles& timeline, nlohmann::json& j) {
  if (timeline.bubble.has_value()) {
    const BubbleAttribution& b = *timeline.bubble;
    j["bubble"]["traced"] = {{"iteration", timeline.iteration},
                             {"measured", b.measured},
                             {"predicted", b.predicted},
                             {"replayed", b.replayed},
                             {"actions", b.actions()},
                             {"runtime", b.runtime()},
                             {"comm_s", b.comm_s}};
  }
  if (timeline.exposure.has_value()) {
    j["reduce"]["traced"] = {{"iteration", timeline.iteration},
                             {"total_s", timeline.exposure->reduce_s},
                             {"exposed_s", timeline.exposure->exposed_s},
                             {"replica_wait_s", timeline.exposure->replica_wait_s}};
  }
}

}  // namespace

nlohmann::json SummaryJson(const RunSummary& s, const TimelineFiles& timeline) {
  nlohmann::json j;
  j["job_id"] = s.job_id;
  j["state"] = s.state;
  j["reason"] = s.reason;
  j["schedule"] = s.schedule;
  j["pipeline"] = s.pipeline;
  j["data"] = s.data;
  j["microbatches"] = s.microbatches;
  j["iterations"] = s.iterations;
  j["steady_iterations"] = s.steady_iterations;
  j["loss_first"] = s.loss_first.has_value() ? nlohmann::json(*s.loss_first) : nlohmann::json();
  j["loss_last"] = s.loss_last.has_value() ? nlohmann::json(*s.loss_last) : nlohmann::json();
  j["losses"] = s.losses;
  nlohmann::json evals = nlohmann::json::array();
  for (const auto& [iteration, loss] : s.eval_losses) {
    evals.push_back({{"iteration", iteration}, {"loss", loss}});
  }
  j["eval_losses"] = evals;
  j["iteration_s"] = s.iteration_s;
  j["tokens_per_s"] = s.tokens_per_s;
  j["wall_s"] = s.wall_s;
  j["bubble"] = {{"measured", s.bubble_measured}, {"predicted", s.bubble_predicted}};
  j["bubble"]["predicted_measured_costs"] =
      s.bubble_predicted_measured_costs ? nlohmann::json(*s.bubble_predicted_measured_costs)
                                        : nlohmann::json(nullptr);
  if (s.cores > 0) {
    j["machine"] = {{"compute_threads", s.local_threads}, {"cores", s.cores}};
  }
  j["ranks"] = RanksJson(s);
  j["reduce"] = {{"total_s", s.reduce_total_s},
                 {"exposed_s", s.reduce_exposed_s},
                 {"overlap", s.reduce_overlap.has_value() ? nlohmann::json(*s.reduce_overlap)
                                                          : nlohmann::json()},
                 {"overlap_predicted", s.reduce_overlap_predicted}};
  AddTraceFindings(timeline, j);
  j["model"] = {{"file", s.model_file}, {"error", s.model_error}};
  if (!s.layout.source().empty()) j["layout"] = LayoutJson(s.layout);
  j["timeline"] = {{"iteration", timeline.iteration},
                   {"chrome", timeline.chrome},
                   {"svg", timeline.svg},
                   {"error", timeline.error}};
  return j;
}

}  // namespace zpipe::cli
