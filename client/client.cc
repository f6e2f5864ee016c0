// The transport-independent half of zpipe::Client; the gRPC half is grpc_client.cc.
#include "client/client.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zpipe {

absl::StatusOr<std::vector<v1::Job>> Client::ListAll(const std::vector<v1::JobState>& states) {
  std::vector<v1::Job> all;
  ListJobsOptions options;
  options.states = states;
  options.page_size = 1000;
  while (true) {
    absl::StatusOr<JobPage> page = List(options);
    if (!page.ok()) return page.status();
    for (v1::Job& job : page->jobs) all.push_back(std::move(job));
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

std::string JobStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  if (absl::StartsWith(name, "JOB_STATE_")) name = name.substr(10);
  return name.empty() ? absl::StrCat("state", static_cast<int>(state)) : absl::AsciiStrToLower(name);
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
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

}  // namespace zpipe
