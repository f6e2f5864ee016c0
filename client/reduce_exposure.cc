#include "client/reduce_exposure.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace zpipe::cli {
namespace {

using Interval = std::pair<double, double>;

bool IsCompute(const std::string& kind) {
  return kind == "F" || kind == "B" || kind == "W" || kind == "BW" || kind == "R";
}

// Sorted, disjoint.
std::vector<Interval> Merge(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// Length of [lo, hi) not covered by `busy` (sorted, disjoint).
double Uncovered(double lo, double hi, const std::vector<Interval>& busy) {
  if (hi <= lo) return 0;
  double covered = 0;
  for (const Interval& b : busy) {
    if (b.first >= hi) break;
    covered += std::max(0.0, std::min(hi, b.second) - std::max(lo, b.first));
  }
  return std::max(0.0, (hi - lo) - covered);
}

}  // namespace

ReduceExposure AnalyzeReduceExposure(const v1::GetTraceResponse& trace) {
  // The last start of each bucket's all-reduce over the replicas.
  std::map<std::tuple<int, int, int>, double> last_start;
  for (const v1::RankTrace& rank : trace.ranks()) {
    for (const v1::TracedAction& a : rank.actions()) {
      if (a.kind() != "REDUCE") continue;
      const auto key = std::make_tuple(rank.pipeline_rank(), a.chunk(), a.bucket());
      auto [it, inserted] = last_start.try_emplace(key, a.start());
      if (!inserted) it->second = std::max(it->second, a.start());
    }
  }
  ReduceExposure out;
  for (const v1::RankTrace& rank : trace.ranks()) {
    std::vector<Interval> compute;
    for (const v1::TracedAction& a : rank.actions()) {
      if (IsCompute(a.kind())) compute.emplace_back(a.start(), a.end());
    }
    compute = Merge(std::move(compute));
    for (const v1::TracedAction& a : rank.actions()) {
      if (a.kind() != "REDUCE" || a.end() < a.start()) continue;
      ++out.reductions;
      out.reduce_s += a.end() - a.start();
      out.exposed_s += Uncovered(a.start(), a.end(), compute);
      const double ready = last_start[std::make_tuple(rank.pipeline_rank(), a.chunk(), a.bucket())];
      out.replica_wait_s += Uncovered(a.start(), std::min(a.end(), ready), compute);
    }
  }
  return out;
}

}  // namespace zpipe::cli
