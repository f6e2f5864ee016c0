// The rows of bench/reference_schedules.tsv (the ZB paper's own generator on random shapes; see
// bench/reference_schedules.py) and our plan for one, shared by the benches that read them.
#ifndef ZPIPE_BENCH_REFERENCE_ROWS_H_
#define ZPIPE_BENCH_REFERENCE_ROWS_H_

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/planning.h"

#ifndef ZPIPE_SOURCE_DIR
#define ZPIPE_SOURCE_DIR "."
#endif

namespace zpipe::bench {

// The rows' file in the source tree the bench was built from.
inline std::string DefaultReferenceData() {
  return std::string(ZPIPE_SOURCE_DIR) + "/bench/reference_schedules.tsv";
}

// One shape and schedule: costs, memory model and limit as the reference generator took them,
// and its span.
struct ReferenceRow {
  std::string kind;
  int p = 0, m = 0;
  double f = 0, b = 0, w = 0, comm = 0, mem_f = 0, mem_b = 0, mem_w = 0, limit = 0, span = 0;
};

inline std::vector<ReferenceRow> ReadReferenceRows(const std::string& path) {
  std::vector<ReferenceRow> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("kind", 0) == 0) continue;
    std::istringstream fields(line);
    ReferenceRow r;
    double bubble = 0;
    fields >> r.kind >> r.p >> r.m >> r.f >> r.b >> r.w >> r.comm >> r.mem_f >> r.mem_b >>
        r.mem_w >> r.limit >> r.span >> bubble;
    if (fields) rows.push_back(r);
  }
  return rows;
}

// Our plan for `row` under the same memory limit (not lowered), with the search's budget.
inline absl::StatusOr<core::PlannedSchedule> PlanReferenceRow(const ReferenceRow& row,
                                                              double budget, uint64_t seed) {
  core::PlanRequest req;
  req.schedule = row.kind;
  req.pipeline = row.p;
  req.microbatches = row.m;
  req.memory_limit = row.limit;
  req.inputs = [&row](const core::Placement& placement) {
    const core::StageCost c{.f = row.f,
                            .b = row.b,
                            .w = row.w,
                            .mem_f = row.mem_f,
                            .mem_b = row.mem_b,
                            .mem_w = row.mem_w};
    return core::UniformInputs(placement, c, row.comm);
  };
  req.lower = false;
  req.search = {.budget_seconds = budget, .seed = seed};
  return core::PlanSchedule(req);
}

}  // namespace zpipe::bench

#endif  // ZPIPE_BENCH_REFERENCE_ROWS_H_
