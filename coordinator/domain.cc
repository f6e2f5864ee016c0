#include "coordinator/domain.h"

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
  }
  return "UNKNOWN";
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
