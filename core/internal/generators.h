// Internal: the individual schedule generators behind GenerateSchedule().
//
// Each takes a request already checked by GenerateSchedule() (p >= 1, m >= 1, a cost model with
// the right number of stages) and the resolved per-rank memory limit.
#ifndef ZPIPE_CORE_INTERNAL_GENERATORS_H_
#define ZPIPE_CORE_INTERNAL_GENERATORS_H_

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "core/schedule.h"

namespace zpipe::core::internal {

absl::StatusOr<Plan> GenerateGpipe(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> Generate1F1B(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateInterleaved(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateZbH1(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateZbH2(const ScheduleRequest& req, double memory_limit);
// ZB automatic: the memory-bounded greedy scheduler (ZB-1p / ZB-2p / zb-auto).
absl::StatusOr<Plan> GenerateZbAuto(const ScheduleRequest& req, double memory_limit,
                                    absl::string_view name);
absl::StatusOr<Plan> GenerateZbV(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateVHalf(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateVMin(const ScheduleRequest& req, double memory_limit);
absl::StatusOr<Plan> GenerateDualPipeV(const ScheduleRequest& req, double memory_limit);

}  // namespace zpipe::core::internal

#endif  // ZPIPE_CORE_INTERNAL_GENERATORS_H_
