#include "coordinator/job_admission.h"

#include <atomic>
#include <cstdint>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/log.h"
#include "coordinator/spec_defaults.h"
#include "coordinator/spec_validator.h"
#include "coordinator/worker_match.h"

namespace zpipe::coordinator {
namespace {

std::string GenerateJobId(absl::Time now) {
  static std::atomic<uint32_t> counter{0};
  return absl::StrFormat("job-%x-%d", absl::ToUnixSeconds(now), counter.fetch_add(1));
}

}  // namespace

absl::StatusOr<SubmitResult> JobAdmission::Submit(std::string job_id, const JobSpec& submitted,
                                                  bool validate_only, std::string submitted_by) {
  if (job_id.empty() && !validate_only) job_id = GenerateJobId(clock_.Now());
  if (!job_id.empty()) {
    if (absl::Status st = ValidateJobId(job_id); !st.ok()) return st;
  }
  if (absl::Status st = ValidateSpecFields(submitted); !st.ok()) return st;
  if (std::holds_alternative<PythonConfig>(submitted.model) && !options_.python_models) {
    return absl::FailedPreconditionError(
        "spec.model.python: this coordinator does not accept Python models: a Python model is "
        "code that every worker of the job runs with its own rights. Start zpipe-coordinator "
        "with --allow-python-models to accept them (docs/guide.md \"Python models\"), or submit a "
        "TorchScript model (model.torchscript)");
  }
  const JobSpec spec = ResolveSpecDefaults(submitted);
  if (!validate_only) {
    absl::MutexLock lock(&lifecycle_.mu());
    if (auto existing = Existing(job_id, spec, submitted_by)) return *existing;
    if (absl::Status st = CheckRoom(job_id, submitted_by); !st.ok()) return st;  // before planning
  }

  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanJob(spec);  // without the lock
  if (!plan.ok()) return plan.status();
  if (validate_only) {
    SubmitResult result;
    result.job.record.id = job_id;
    result.job.record.spec = spec;
    result.job.plan = *plan;
    return result;
  }

  absl::MutexLock lock(&lifecycle_.mu());
  // A concurrent submit of the same id may have come first.
  if (auto existing = Existing(job_id, spec, submitted_by)) return *existing;
  if (lifecycle_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
  if (absl::Status st = CheckRoom(job_id, submitted_by); !st.ok()) return st;
  return Create(job_id, spec, std::move(submitted_by), *std::move(plan));
}

std::optional<absl::StatusOr<SubmitResult>> JobAdmission::Existing(
    const std::string& job_id, const JobSpec& spec, const std::string& submitted_by) const {
  const JobRecord* job = lifecycle_.queue().Find(job_id);
  if (job == nullptr) return std::nullopt;
  if (job->submitted_by != submitted_by) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job_id: job '", job_id, "' already exists, submitted by someone else; choose another id"));
  }
  if (job->spec == spec) return SubmitResult{lifecycle_.View(*job, true, true), false};
  return absl::AlreadyExistsError(absl::StrCat(
      "job_id: job '", job_id, "' already exists with a different spec; choose another id"));
}

absl::Status JobAdmission::CheckRoom(const std::string& job_id, const std::string& submitted_by) {
  const int pending = lifecycle_.queue().PendingCount();
  if (pending >= options_.max_pending_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(pending, " jobs are pending (the --max-pending-jobs limit of ",
                     options_.max_pending_jobs, "); wait or cancel some"));
  }
  // One identity may not fill the queue for everyone. Without token files every caller is the
  // same anonymous "" and only the global limit applies.
  if (!submitted_by.empty()) {
    int mine = 0;
    for (const auto& [order, job] : lifecycle_.queue().all()) {
      mine += job.state == JobState::kPending && job.submitted_by == submitted_by;
    }
    if (mine >= options_.max_pending_jobs_per_client) {
      return absl::ResourceExhaustedError(
          absl::StrCat(mine, " jobs of '", submitted_by,
                       "' are pending (the --max-pending-jobs-per-client limit of ",
                       options_.max_pending_jobs_per_client, "); wait or cancel some of yours"));
    }
  }
  // A store that holds back earlier changes would not keep this job either.
  if (!writer_.HasUnsaved()) return absl::OkStatus();
  absl::Status st = lifecycle_.RetryUnsaved();
  if (st.ok()) return st;
  return absl::Status(st.code(),
                      absl::StrCat("job '", job_id, "' was not created: ", st.message()));
}

absl::StatusOr<SubmitResult> JobAdmission::Create(const std::string& job_id, const JobSpec& spec,
                                                  std::string submitted_by,
                                                  std::shared_ptr<const JobPlan> plan) {
  JobRecord rec;
  rec.id = job_id;
  rec.spec = spec;
  rec.state = JobState::kPending;
  rec.reason = WaitingReason(spec, 0, {});
  rec.create_time = clock_.Now();
  rec.submitted_by = std::move(submitted_by);
  rec.submit_order = lifecycle_.queue().NextSubmitOrder();
  // Stored before it exists in memory, so a client never holds an id a restart would lose.
  if (absl::Status st = writer_.PutNew(rec); !st.ok()) {
    LogError("job ", job_id, ": store write failed, submit refused: ", st.ToString());
    if (absl::IsResourceExhausted(st)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator's job store is full and could not save job '", job_id,
                       "' (", st.message(),
                       "); the job was not created. Free space on the disk of the coordinator's "
                       "--db and submit again"));
    }
    return absl::UnavailableError(absl::StrCat("the job store could not save job '", job_id,
                                               "': ", st.message(), "; the job was not created"));
  }
  JobRecord& job = lifecycle_.Admit(std::move(rec), std::move(plan));
  return SubmitResult{lifecycle_.View(job, true, true), true};
}

}  // namespace zpipe::coordinator
