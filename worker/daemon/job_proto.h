// The worker's edge for job messages: worker.proto's Assignment, ProfileRequest and PlanUpdate
// become the domain types of job_config.h, plan_switch.h and job_runner.h here, once, on entry;
// what the job produces for the coordinator (profile results, log batches) becomes proto here on
// the way out. Nothing past this file reads a job's proto.
//
// The spec arrives resolved: the coordinator fills every default once (coordinator/
// spec_defaults.h) before it assigns a job. The edge never fills one itself; a field the
// coordinator resolves that is unset here (an older coordinator, a hand-made assignment) is an
// INVALID_ARGUMENT naming the field, like any other bad value (an unknown optimizer, a plan that
// does not parse, a rank outside the plan). Never a crash.
#ifndef ZPIPE_WORKER_DAEMON_JOB_PROTO_H_
#define ZPIPE_WORKER_DAEMON_JOB_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/daemon/job_config.h"
#include "worker/daemon/job_log.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/plan_switch.h"
#include "zpipe/v1/worker.pb.h"

namespace zpipe::worker {

// The job an assignment gives this worker: its settings (JobSettingsFromProto), this rank's place,
// the parsed plan (this rank must be in it) and, for a synthetic model, every stage's costs.
// Errors start with "assignment: ".
absl::StatusOr<JobConfig> FromAssignment(const zpipe::v1::Assignment& assignment);

// A job spec as the coordinator resolved it. Errors name the field ("spec.train.optimizer ...").
absl::StatusOr<JobSettings> JobSettingsFromProto(const zpipe::v1::JobSpec& spec);

// The worker's device kind (--device) as a job's device kind; UNSPECIFIED is the CPU.
DeviceKind DeviceKindFromProto(zpipe::v1::DeviceKind kind);

PlanUpdate PlanUpdateFromProto(const zpipe::v1::PlanUpdate& update);

zpipe::v1::ProfileResult ProfileResultToProto(const std::string& job_id, int attempt,
                                              const JobProfile& profile);

zpipe::v1::WorkerMessage LogBatchToProto(const JobLogBatch& batch);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_JOB_PROTO_H_
