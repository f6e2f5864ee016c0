#include "coordinator/domain.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {

absl::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kScheduling:
      return "SCHEDULING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kRestarting:
      return "RESTARTING";
  }
  return "UNKNOWN";
}

const std::vector<int>* BlockModelCuts(const JobSpec& spec) {
  return MutableBlockModelCuts(const_cast<JobSpec&>(spec));
}

std::vector<int>* MutableBlockModelCuts(JobSpec& spec) {
  if (auto* t = std::get_if<TorchScriptConfig>(&spec.model)) return &t->cuts;
  if (auto* p = std::get_if<PythonConfig>(&spec.model)) return &p->cuts;
  return nullptr;
}

absl::string_view BlockModelField(const JobSpec& spec) {
  return std::holds_alternative<PythonConfig>(spec.model) ? "model.python" : "model.torchscript";
}

absl::StatusOr<absl::Duration> RestartBackoff(const JobSpec& spec) {
  if (spec.restart_backoff.empty()) return absl::Seconds(2);
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(spec.restart_backoff, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(spec.restart_backoff, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.restart.backoff: '",
                                                   spec.restart_backoff.substr(0, 64),
                                                   "' is not a duration (e.g. 5s, 500ms, 1m)"));
  }
  if (d < absl::ZeroDuration() || d > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.restart.backoff: must be 0s..1h, got ",
                                                   spec.restart_backoff.substr(0, 64)));
  }
  return d;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

absl::string_view WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kIdle:
      return "idle";
    case WorkerState::kBusy:
      return "busy";
    case WorkerState::kDead:
      return "dead";
  }
  return "unknown";
}

}  // namespace zpipe::coordinator
