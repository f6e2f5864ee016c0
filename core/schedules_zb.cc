// ZB-H1, ZB-H2 and the ZB automatic (memory-bounded greedy) scheduler.
#include "absl/status/status.h"
#include "core/internal/generators.h"

namespace zpipe::core::internal {

absl::StatusOr<Plan> GenerateZbH1(const ScheduleRequest&, double) {
  return absl::UnimplementedError("zb-h1: not implemented yet");
}
absl::StatusOr<Plan> GenerateZbH2(const ScheduleRequest&, double) {
  return absl::UnimplementedError("zb-h2: not implemented yet");
}
absl::StatusOr<Plan> GenerateZbAuto(const ScheduleRequest&, double, absl::string_view name) {
  return absl::UnimplementedError(std::string(name) + ": not implemented yet");
}

}  // namespace zpipe::core::internal
