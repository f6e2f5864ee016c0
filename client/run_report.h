// The summary `zpipe run` prints when its job has ended: a text report (loss, throughput, bubble
// measured against predicted, reduce overlap, the traced iteration's bubble split and drift, and
// a table per rank) or, with -o json, one JSON object with the same numbers.
#ifndef ZPIPE_CLIENT_RUN_REPORT_H_
#define ZPIPE_CLIENT_RUN_REPORT_H_

#include <nlohmann/json.hpp>
#include <ostream>

#include "client/run_summary.h"
#include "client/run_timeline.h"

namespace zpipe::cli {

// The text report. The per-rank table has reduce columns when anything was reduced (d > 1) and
// optimizer-step columns when any rank stepped an optimizer.
void PrintSummary(std::ostream& out, const RunSummary& s, const TimelineFiles& timeline);

// The -o json report (docs/guide.md "Running a job locally").
nlohmann::json SummaryJson(const RunSummary& s, const TimelineFiles& timeline);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_RUN_REPORT_H_
