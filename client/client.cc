// The transport-independent half of zpipe::Client; the gRPC half is grpc_client.cc.
#include "client/client.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace zpipe {

absl::StatusOr<std::vector<v1::Job>> Client::ListAll(const std::vector<v1::JobState>& states) {
  ListJobsOptions options;
  options.states = states;
  return ListAll(std::move(options));
}

absl::StatusOr<std::vector<v1::Job>> Client::ListAll(ListJobsOptions options) {
  std::vector<v1::Job> all;
  options.page_size = 1000;
  options.page_token.clear();
  while (true) {
    absl::StatusOr<JobPage> page = List(options);
    if (!page.ok()) return page.status();
    for (v1::Job& job : page->jobs) all.push_back(std::move(job));
    if (page->next_page_token.empty()) return all;
    options.page_token = page->next_page_token;
  }
}

absl::StatusOr<std::vector<v1::Worker>> Client::Workers(bool include_dead) {
  std::vector<v1::Worker> all;
  ListWorkersOptions options;
  options.include_dead = include_dead;
  options.page_size = 1000;
  while (true) {
    absl::StatusOr<WorkerPage> page = ListWorkers(options);
    if (!page.ok()) return page.status();
    for (v1::Worker& worker : page->workers) all.push_back(std::move(worker));
    if (page->next_page_token.empty()) return all;
    options.page_token = page->next_page_token;
  }
}

absl::Status Client::Watch(const std::string& job_id, const WatchOptions& options,
                           const std::function<bool(const v1::JobEvent&)>& on_event) {
  std::unique_ptr<JobWatch> watch = Watch(job_id, options);
  while (true) {
    absl::StatusOr<std::optional<v1::JobEvent>> event = watch->Next();
    if (!event.ok()) return event.status();
    if (!event->has_value()) return absl::OkStatus();
    if (!on_event(**event)) {
      watch->Cancel();
      return absl::OkStatus();
    }
  }
}

absl::StatusOr<v1::Job> Client::WaitForTerminal(const std::string& job_id) {
  WatchOptions options;
  options.progress_interval_ms = 1000;
  absl::Status status = Watch(job_id, options, [](const v1::JobEvent& event) {
    if (event.has_snapshot()) return !IsTerminal(event.snapshot().state());
    if (event.has_state_change()) return !IsTerminal(event.state_change().to());
    return true;
  });
  if (!status.ok()) return status;
  return Get(job_id);
}

absl::StatusOr<UploadedArtifact> Client::UploadArtifact(const std::string&, const std::string&,
                                                        uint64_t) {
  return absl::UnimplementedError("this client cannot upload artifacts");
}

absl::StatusOr<v1::ServerInfo> Client::ServerInfo() {
  return absl::UnimplementedError("this client does not implement ServerInfo");
}

absl::StatusOr<JobTrace> Client::Trace(const std::string&, std::optional<int>) {
  return absl::UnimplementedError("this client does not implement Trace");
}

absl::Status Client::Logs(const std::string&, const LogsOptions&,
                          const std::function<bool(const v1::LogLine&)>&, uint64_t*) {
  return absl::UnimplementedError("this client does not implement Logs");
}

absl::StatusOr<JobTrace> JobTraceFromProto(v1::GetTraceResponse response) {
  JobTrace out;
  auto convert = [](const v1::RankTrace& r, core::RankTimeline& row) -> absl::Status {
    row.pipeline_rank = r.pipeline_rank();
    row.data_rank = r.data_rank();
    row.worker = r.worker_name();
    for (const v1::TracedAction& a : r.actions()) {
      absl::StatusOr<core::ActionKind> kind = core::ParseActionKind(a.kind());
      if (!kind.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("trace: unknown action kind '", a.kind(), "'"));
      }
      core::Action action;
      action.kind = *kind;
      action.stage = a.stage();
      action.microbatch = a.microbatch();
      action.peer = a.peer();
      action.chunk = a.chunk();
      action.bucket = a.bucket();
      row.actions.push_back({action, a.start(), a.end()});
    }
    return absl::OkStatus();
  };
  const std::string what =
      absl::StrCat("job ", response.job_id(), " iteration ", response.iteration(),
                   response.schedule().empty() ? "" : absl::StrCat(" (", response.schedule(), ")"));
  out.executed.title = what;
  out.executed.iteration = response.iteration();
  for (const v1::RankTrace& r : response.ranks()) {
    if (absl::Status s = convert(r, out.executed.ranks.emplace_back()); !s.ok()) return s;
  }
  out.predicted.title = absl::StrCat(what, " predicted");
  out.predicted.iteration = response.iteration();
  for (const v1::RankTrace& r : response.predicted()) {
    if (absl::Status s = convert(r, out.predicted.ranks.emplace_back()); !s.ok()) return s;
  }
  out.response = std::move(response);
  return out;
}

namespace {

std::string Mebibytes(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::Status ExplainOversizeRequest(absl::Status status, const std::string& what) {
  // gRPC's wording, from its message size filter (grpc 1.51 and later): "... larger than max
  // (<size> vs. <limit>)". Anything else is not ours to restate.
  if (status.code() != absl::StatusCode::kResourceExhausted) return status;
  absl::string_view text = status.message();
  const size_t at = text.find("larger than max (");
  if (at == absl::string_view::npos) return status;
  text.remove_prefix(at + 17);
  text = text.substr(0, text.find(')'));
  std::vector<absl::string_view> parts = absl::StrSplit(text, " vs. ");
  uint64_t size = 0, limit = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &size) ||
      !absl::SimpleAtoi(parts[1], &limit)) {
    return status;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " is ", Mebibytes(size), "; the coordinator accepts at most ", Mebibytes(limit),
      " per request (--max-message-bytes on zpipe-coordinator)"));
}

std::string JobStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  if (absl::StartsWith(name, "JOB_STATE_")) name = name.substr(10);
  return name.empty() ? absl::StrCat("state", static_cast<int>(state))
                      : absl::AsciiStrToLower(name);
}

absl::StatusOr<v1::JobState> ParseJobState(const std::string& text) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(upper, "JOB_STATE_")) upper = "JOB_STATE_" + upper;
  v1::JobState state;
  if (upper != "JOB_STATE_UNSPECIFIED" && v1::JobState_Parse(upper, &state)) return state;
  std::vector<std::string> names;
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JobState_MAX; ++s) {
    if (v1::JobState_IsValid(s)) names.push_back(JobStateName(static_cast<v1::JobState>(s)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job state '", text, "' (one of: ", absl::StrJoin(names, ", "), ")"));
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace zpipe
