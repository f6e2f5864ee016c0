// V-shape schedules: ZB-V, V-Half, V-Min and DualPipeV.
#include "absl/status/status.h"
#include "core/internal/generators.h"

namespace zpipe::core::internal {

absl::StatusOr<Plan> GenerateZbV(const ScheduleRequest&, double) {
  return absl::UnimplementedError("zb-v: not implemented yet");
}
absl::StatusOr<Plan> GenerateVHalf(const ScheduleRequest&, double) {
  return absl::UnimplementedError("v-half: not implemented yet");
}
absl::StatusOr<Plan> GenerateVMin(const ScheduleRequest&, double) {
  return absl::UnimplementedError("v-min: not implemented yet");
}
absl::StatusOr<Plan> GenerateDualPipeV(const ScheduleRequest&, double) {
  return absl::UnimplementedError("dualpipe-v: not implemented yet");
}

}  // namespace zpipe::core::internal
