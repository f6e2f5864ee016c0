// FakeClient: an in-memory zpipe::Client for tests of code that drives a coordinator (the CLI's
// subcommands, programs embedding ZeroPipe). It keeps jobs and workers in memory, follows the
// API's contract for ids, idempotent submit, paging and cancel, and lets the test move jobs
// between states (which Watch streams as state changes). Thread-safe.
#ifndef ZPIPE_CLIENT_FAKE_CLIENT_H_
#define ZPIPE_CLIENT_FAKE_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

namespace zpipe {

class FakeClient : public Client {
 public:
  FakeClient() = default;

  // Test controls.
  // Every call fails with UNAVAILABLE while set (an unreachable coordinator).
  void SetUnavailable(bool unavailable);
  // Moves a job to `state` with `reason`; watchers see a state change (and the stream ends on a
  // terminal state). Returns false for an unknown job.
  bool SetState(const std::string& job_id, v1::JobState state, const std::string& reason = "");
  // Appends an event (e.g. an iteration summary or progress) to the job's stream.
  bool AddEvent(const std::string& job_id, v1::JobEvent event);
  void SetPlan(const std::string& job_id, JobPlan plan);
  // Edits the job's record in place (no event). Returns false for an unknown job.
  bool EditJob(const std::string& job_id, const std::function<void(v1::Job&)>& edit);
  void SetWorkers(std::vector<v1::Worker> workers);

  // Client.
  absl::StatusOr<SubmitResult> Submit(const v1::JobSpec& spec, const std::string& job_id,
                                      bool validate_only) override;
  absl::StatusOr<v1::Job> Get(const std::string& job_id) override;
  absl::StatusOr<JobPage> List(const ListJobsOptions& options) override;
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason) override;
  absl::StatusOr<v1::JobState> Delete(const std::string& job_id, bool force) override;
  std::unique_ptr<JobWatch> Watch(const std::string& job_id, WatchOptions options) override;
  absl::StatusOr<JobPlan> Plan(const std::string& job_id) override;
  absl::StatusOr<WorkerPage> ListWorkers(const ListWorkersOptions& options) override;
  using Client::Watch;

 private:
  class FakeJobWatch;
  struct JobEntry {
    v1::Job job;
    std::vector<v1::JobEvent> events;  // everything after the job's creation, in order
  };

  absl::Status CheckReachable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendLocked(JobEntry& entry, v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ChangeStateLocked(JobEntry& entry, v1::JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled when an event is appended or a watch is cancelled
  bool unavailable_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // submission order
  std::map<std::string, JobPlan> plans_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe

#endif  // ZPIPE_CLIENT_FAKE_CLIENT_H_
