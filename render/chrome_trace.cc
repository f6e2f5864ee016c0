#include "render/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zpipe::render {

using core::ActionKind;
using core::ActionKindName;
using core::ActionToString;
using core::ExecutedTimeline;
using core::IsComm;
using core::RankTimeline;
using core::TimedAction;

namespace {

constexpr const char* kTrackNames[] = {"", "F", "B", "W", "SEND", "RECV", "REDUCE"};
constexpr int kPredictedPidBase = 100000;

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

double FirstStart(const ExecutedTimeline& t) {
  double first = std::numeric_limits<double>::infinity();
  for (const RankTimeline& r : t.ranks) {
    for (const TimedAction& a : r.actions) first = std::min(first, a.start);
  }
  return std::isfinite(first) ? first : 0;
}

void AppendMeta(std::string& out, const char* name, int pid, int tid, const std::string& arg_key,
                const std::string& arg_json) {
  absl::StrAppend(&out, out.back() == '[' ? "\n" : ",\n", "{\"ph\":\"M\",\"name\":\"", name,
                  "\",\"pid\":", pid, ",\"tid\":", tid, ",\"args\":{\"", arg_key, "\":", arg_json,
                  "}}");
}

void AppendTimeline(std::string& out, const ExecutedTimeline& t, int pid_base,
                    const std::string& label_prefix, int sort_base, bool rebase) {
  const double t0 = rebase ? FirstStart(t) : 0;
  for (size_t i = 0; i < t.ranks.size(); ++i) {
    const RankTimeline& r = t.ranks[i];
    const int pid = pid_base + static_cast<int>(i);
    std::string name = absl::StrCat(label_prefix, "rank ", r.pipeline_rank);
    if (r.data_rank != 0 || !r.worker.empty()) absl::StrAppend(&name, " (dp ", r.data_rank, ")");
    if (!r.worker.empty()) absl::StrAppend(&name, " ", r.worker);
    AppendMeta(out, "process_name", pid, 0, "name", JsonString(name));
    AppendMeta(out, "process_sort_index", pid, 0, "sort_index",
               absl::StrCat(sort_base + static_cast<int>(i)));
    for (int tid = 1; tid <= 6; ++tid) {
      AppendMeta(out, "thread_name", pid, tid, "name", JsonString(kTrackNames[tid]));
      AppendMeta(out, "thread_sort_index", pid, tid, "sort_index", absl::StrCat(tid * 100));
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
          AppendMeta(out, "thread_name", pid, tid, "name",
                     JsonString(absl::StrCat(kTrackNames[track], " ", lane + 1)));
          AppendMeta(out, "thread_sort_index", pid, tid, "sort_index", absl::StrCat(tid));
        }
      } else {
        ends[lane] = std::max(ends[lane], a.end);
      }
      const int tid = lane == 0 ? track : track * 100 + static_cast<int>(lane);
      const double ts = (a.start - t0) * 1e6;
      const double dur = std::max(0.0, a.end - a.start) * 1e6;
      std::string args = absl::StrCat("\"kind\":", JsonString(ActionKindName(a.action.kind)),
                                      ",\"iteration\":", t.iteration);
      if (a.action.kind == ActionKind::kReduce) {
        absl::StrAppend(&args, ",\"chunk\":", a.action.chunk, ",\"bucket\":", a.action.bucket);
      } else {
        absl::StrAppend(&args, ",\"stage\":", a.action.stage,
                        ",\"microbatch\":", a.action.microbatch);
        if (IsComm(a.action.kind)) absl::StrAppend(&args, ",\"peer\":", a.action.peer);
      }
      absl::StrAppendFormat(&out,
                            ",\n{\"ph\":\"X\",\"name\":%s,\"cat\":%s,\"pid\":%d,\"tid\":%d,"
                            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{%s}}",
                            JsonString(ActionToString(a.action)),
                            JsonString(ActionKindName(a.action.kind)), pid, tid, ts, dur, args);
    }
  }
}

}  // namespace

int ChromeTrackOf(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
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
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":";
  absl::StrAppend(&out, JsonString(executed.title), ",\"iteration\":", executed.iteration,
                  "},\n\"traceEvents\":[");
  AppendTimeline(out, executed, 0, "", 0, options.rebase);
  if (options.predicted != nullptr) {
    AppendTimeline(out, *options.predicted, kPredictedPidBase, "predicted ", 1000, options.rebase);
  }
  out += "\n]}\n";
  return out;
}

}  // namespace zpipe::render
