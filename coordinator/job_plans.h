// JobPlans: the plan each job runs, and its re-planning from measured costs
// (schedule.replan_every; the pure part is replanner.h).
//
// A job's plan is made at submit (or from the profile of its model's blocks), or after a
// coordinator restart from its record (Make: the profiled layout, and the costs and version of
// its last re-plan, JobRecord::plan_costs and plan_version): for every unfinished job as the
// coordinator loads them, for a finished one on first read. A plan that cannot be made is not
// tried again. While the job runs,
// every complete iteration summary goes into a window of iterations run with the current plan;
// every replan_every of them, a check is due (Observe), which the caller runs without any lock
// (ProposeReplan: generating and simulating two plans) before handing the proposal back
// (MaybeSwitch). A better plan is sent to every rank for one switch iteration; the summary of
// that iteration settles it: applied when every rank ran the new plan, else abandoned (the ranks
// kept the old one: PlanUpdate in worker.proto). A new attempt forgets the window and any switch
// on its way (StartOver).
//
// Thread-safe, with its own lock. Lock order: JobLifecycle's lock (which guards the JobRecord
// that Observe and MaybeSwitch change; callers hold it) comes first; under this one only leaves
// are taken (RunMonitor, JobEventLog, Metrics, WorkerConnection::Send). The injected
// collaborators must outlive it.
#ifndef ZPIPE_COORDINATOR_JOB_PLANS_H_
#define ZPIPE_COORDINATOR_JOB_PLANS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/clock.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/metrics.h"
#include "coordinator/planner.h"
#include "coordinator/replanner.h"
#include "coordinator/run_monitor.h"
#include "coordinator/worker_connection.h"

namespace zpipe::coordinator {

// What a due re-plan check works on, copied out of the locks.
struct ReplanCheck {
  JobSpec spec;
  std::shared_ptr<const JobPlan> plan;
  std::optional<ModelLayout> layout;
  ReplanWindow window;
  int attempt = 0;
  double iteration_seconds = 0;
};

class JobPlans {
 public:
  JobPlans(Clock& clock, Metrics& metrics, RunMonitor& monitor, JobEventLog& events)
      : clock_(clock), metrics_(metrics), monitor_(monitor), events_(events) {}

  // The plan `job` runs, made on first use (Make, without this lock: up to the search budget of
  // one core; callers that hold other locks should find it made); null when it cannot be made
  // (logged once).
  std::shared_ptr<const JobPlan> For(const JobRecord& job) ABSL_LOCKS_EXCLUDED(mu_);
  // The plan `job` runs, made anew from its record: its spec, the profiled layout of its model
  // (JobRecord::layout) and the costs and version of its last re-plan (plan_costs, plan_version).
  // The same record gives the same plan, on any coordinator.
  static absl::StatusOr<std::shared_ptr<const JobPlan>> Make(const JobRecord& job);
  // The plan `job_id` runs without making one: null when it has none (yet).
  std::shared_ptr<const JobPlan> Find(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether For() has nothing left to do for the job: a plan was made, or failed.
  bool Known(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  void Set(const std::string& job_id, std::shared_ptr<const JobPlan> plan) ABSL_LOCKS_EXCLUDED(mu_);
  // A new attempt of the job: a switch sent to the previous attempt's ranks never happens, and
  // measuring starts over.
  void StartOver(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the job's plan and re-planning state (a deleted job).
  void Forget(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The plan a rank ran an iteration with, by the plan version its report names: the switch on
  // its way when the versions match (the switch iteration's reports come before it is settled),
  // else the current plan.
  std::shared_ptr<const JobPlan> ForReport(const std::string& job_id, int plan_version) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // A complete iteration `summary` of RUNNING `job`: settles a switch on its way once the summary
  // reaches its iteration (updating the job's plan version and costs, with an event), adds the
  // summary to the window and returns the inputs of a check when one is due.
  std::optional<ReplanCheck> Observe(JobRecord& job, const IterationSummary& summary)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `proposal` to every rank (connection_of: a rank's worker by name, null when it has no
  // session) for an iteration SwitchIteration puts after the latest one the job reported (not
  // the measured one: the ranks went on while the proposal was searched), when it beats the
  // running plan by the spec's threshold, the switch comes in time,
  // every rank is connected, and the job still runs `check.plan` in the same attempt. True when
  // sent: `job` changed (an event), the caller stores it.
  bool MaybeSwitch(JobRecord& job, const ReplanCheck& check, ReplanProposal proposal,
                   absl::FunctionRef<WorkerConnection*(const std::string&)> connection_of)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A re-plan sent to the ranks, waiting for the summary of its switch iteration.
  struct PendingSwitch {
    ReplanProposal proposal;
    int switch_iteration = 0;
    int measured_iteration = 0;
  };
  struct Entry {
    std::shared_ptr<const JobPlan> plan;
    bool failed = false;                   // the plan could not be made; not retried
    ReplanWindow window;                   // iterations run with `plan` since the last check
    std::optional<PendingSwitch> pending;  // a switch on its way to the ranks
  };

  // The summary of `pending`'s switch iteration arrived: applied or abandoned.
  void SettleLocked(JobRecord& job, Entry& entry, PendingSwitch pending,
                    const IterationSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `proposal` is worth switching to (logs why not).
  bool WorthSwitching(const JobRecord& job, const Entry& entry,
                      const ReplanProposal& proposal) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SendSwitch(const JobRecord& job, const PendingSwitch& pending,
                  absl::FunctionRef<WorkerConnection*(const std::string&)> connection_of) const;
  void AppendSwitchEvent(JobRecord& job, PlanSwitchEvent event, std::string reason);

  Clock& clock_;
  Metrics& metrics_;
  RunMonitor& monitor_;
  JobEventLog& events_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_PLANS_H_
