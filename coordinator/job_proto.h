// Adapters between coordinator domain types and zpipe.v1 job messages (job.proto).
#ifndef ZPIPE_COORDINATOR_JOB_PROTO_H_
#define ZPIPE_COORDINATOR_JOB_PROTO_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/job_manager.h"
#include "coordinator/planner.h"
#include "google/protobuf/timestamp.pb.h"
#include "zpipe/v1/coordinator.pb.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe::coordinator {

// Fails (InvalidArgument naming the field) only on values proto can carry but the domain cannot,
// e.g. an unknown enum number; range checks are ValidateSpecFields' job.
absl::StatusOr<JobSpec> SpecFromProto(const v1::JobSpec& proto);
v1::JobSpec SpecToProto(const JobSpec& spec);

v1::JobState StateToProto(JobState state);
absl::StatusOr<JobState> StateFromProto(v1::JobState state);

v1::DeviceKind DeviceKindToProto(DeviceKind kind);

v1::RankIterationStats RankStatsToProto(const RankStats& stats);
RankStats RankStatsFromProto(const v1::RankIterationStats& proto);
v1::IterationSummary SummaryToProto(const IterationSummary& summary);
IterationSummary SummaryFromProto(const v1::IterationSummary& proto);

v1::RankAssignment RankSlotToProto(const RankSlot& slot);
RankSlot RankSlotFromProto(const v1::RankAssignment& proto);

v1::PlanStats PlanStatsToProto(const JobPlan& plan);

// The record part of a Job message (no progress, predicted stats or queue position).
v1::Job JobRecordToProto(const JobRecord& record);
v1::ModelLayout ModelLayoutToProto(const ModelLayout& layout);
v1::JobAttempt AttemptToProto(const JobAttemptRecord& attempt);
JobAttemptRecord AttemptFromProto(const v1::JobAttempt& attempt);
v1::PlanStageCost PlanStageCostToProto(const PlanStageCost& cost);
PlanStageCost PlanStageCostFromProto(const v1::PlanStageCost& cost);

v1::JobProgress ProgressToProto(const JobProgressView& progress);
// The full Job message: record, predicted stats, progress, queue position.
v1::Job JobViewToProto(const JobView& view);
// A WatchJob event (state change or iteration summary).
void JobEventToProto(const JobEvent& event, v1::JobEvent* out);
// A stored event back (the store keeps JobEventToProto's messages); InvalidArgument for a kind
// JobEventToProto never writes (a snapshot or progress).
absl::StatusOr<JobEvent> JobEventFromProto(const v1::JobEvent& proto);

// Unset (InfinitePast) times map to an unset Timestamp.
void TimeToProto(absl::Time t, google::protobuf::Timestamp* out);
absl::Time TimeFromProto(const google::protobuf::Timestamp& ts);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_PROTO_H_
