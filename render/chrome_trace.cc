#include "render/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "render/internal/json.h"

namespace zpipe::render {

using core::ActionKind;
using core::ActionKindName;
using core::ActionToString;
using core::ExecutedTimeline;
using core::IsComm;
using core::RankTimeline;
using core::TimedAction;

namespace {

using internal::Json;

constexpr const char* kTrackNames[] = {"", "F", "B", "W", "SEND", "RECV", "REDUCE"};
constexpr int kPredictedPidBase = 100000;

// Microseconds as the format counts them, to the nanosecond (what "%.3f" kept before).
Json Micros(double seconds) { return internal::JsonNumber(std::round(seconds * 1e9) / 1e3); }

double FirstStart(const ExecutedTimeline& t) {
  double first = std::numeric_limits<double>::infinity();
  for (const RankTimeline& r : t.ranks) {
    for (const TimedAction& a : r.actions) first = std::min(first, a.start);
  }
  return std::isfinite(first) ? first : 0;
}

// A metadata event: a process's or thread's name or sort index.
void AppendMeta(Json& events, const char* name, int pid, int tid, const char* arg_key,
                Json arg) {
  events.push_back({{"ph", "M"},
                    {"name", name},
                    {"pid", pid},
                    {"tid", tid},
                    {"args", {{arg_key, std::move(arg)}}}});
}

// The complete event of one action: named by its text form, with what identifies it as args.
Json ActionEvent(const TimedAction& a, int iteration, int pid, int tid, double t0) {
  Json args = {{"kind", std::string(ActionKindName(a.action.kind))}, {"iteration", iteration}};
  if (a.action.kind == ActionKind::kReduce) {
    args["chunk"] = a.action.chunk;
    args["bucket"] = a.action.bucket;
  } else {
    args["stage"] = a.action.stage;
    args["microbatch"] = a.action.microbatch;
    if (IsComm(a.action.kind)) args["peer"] = a.action.peer;
  }
  return {{"ph", "X"},
          {"name", ActionToString(a.action)},
          {"cat", std::string(ActionKindName(a.action.kind))},
          {"pid", pid},
          {"tid", tid},
          {"ts", Micros(a.start - t0)},
          {"dur", Micros(std::max(0.0, a.end - a.start))},
          {"args", std::move(args)}};
}

void AppendTimeline(Json& events, const ExecutedTimeline& t, int pid_base,
                    const std::string& label_prefix, int sort_base, bool rebase) {
  const double t0 = rebase ? FirstStart(t) : 0;
  for (size_t i = 0; i < t.ranks.size(); ++i) {
    const RankTimeline& r = t.ranks[i];
    const int pid = pid_base + static_cast<int>(i);
    std::string name = absl::StrCat(label_prefix, "rank ", r.pipeline_rank);
    if (r.data_rank != 0 || !r.worker.empty()) absl::StrAppend(&name, " (dp ", r.data_rank, ")");
    if (!r.worker.empty()) absl::StrAppend(&name, " ", r.worker);
    AppendMeta(events, "process_name", pid, 0, "name", name);
    AppendMeta(events, "process_sort_index", pid, 0, "sort_index", sort_base + static_cast<int>(i));
    for (int tid = 1; tid <= 6; ++tid) {
      AppendMeta(events, "thread_name", pid, tid, "name", kTrackNames[tid]);
      AppendMeta(events, "thread_sort_index", pid, tid, "sort_index", tid * 100);
    }
    // Complete events on one thread must nest, and sends or receives in flight together overlap:
    // each event goes to the first lane of its track that is free by its start (lane 0 = the
    // track's own tid, lane k = extra thread tid * 100 + k, sorted right below it).
    std::vector<size_t> order(r.actions.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return r.actions[a].start < r.actions[b].start; });
    std::map<int, std::vector<double>> lane_ends;  // track -> end of each lane's last event
    for (const size_t k : order) {
      const TimedAction& a = r.actions[k];
      const int track = ChromeTrackOf(a.action.kind);
      std::vector<double>& ends = lane_ends[track];
      size_t lane = 0;
      while (lane < ends.size() && ends[lane] > a.start) ++lane;
      if (lane == ends.size()) {
        ends.push_back(a.end);
        if (lane > 0) {
          const int tid = track * 100 + static_cast<int>(lane);
          AppendMeta(events, "thread_name", pid, tid, "name",
                     absl::StrCat(kTrackNames[track], " ", lane + 1));
          AppendMeta(events, "thread_sort_index", pid, tid, "sort_index", tid);
        }
      } else {
        ends[lane] = std::max(ends[lane], a.end);
      }
      const int tid = lane == 0 ? track : track * 100 + static_cast<int>(lane);
      events.push_back(ActionEvent(a, t.iteration, pid, tid, t0));
    }
  }
}

}  // namespace

int ChromeTrackOf(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
    case ActionKind::kRecompute:
      return 1;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardFull:
      return 2;
    case ActionKind::kBackwardWeight:
      return 3;
    case ActionKind::kSendAct:
    case ActionKind::kSendGrad:
      return 4;
    case ActionKind::kRecvAct:
    case ActionKind::kRecvGrad:
      return 5;
    case ActionKind::kReduce:
      return 6;
  }
  return 1;
}

std::string ChromeTraceJson(const ExecutedTimeline& executed, const ChromeTraceOptions& options) {
  Json events = Json::array();
  AppendTimeline(events, executed, 0, "", 0, options.rebase);
  if (options.predicted != nullptr) {
    AppendTimeline(events, *options.predicted, kPredictedPidBase, "predicted ", 1000,
                   options.rebase);
  }
  const Json trace = {{"displayTimeUnit", "ms"},
                      {"otherData", {{"title", executed.title}, {"iteration", executed.iteration}}},
                      {"traceEvents", std::move(events)}};
  return internal::DumpLine(trace);
}

}  // namespace zpipe::render
