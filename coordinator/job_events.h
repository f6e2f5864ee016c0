// JobEventLog: the per-job event history WatchJob streams and resumes from.
//
// The job manager assigns each job's events strictly increasing sequence numbers (persisted with
// the job, so they keep increasing across restarts) and appends them here. The log retains the
// last kRetained state changes and iteration summaries per job; a watcher that resumes after a
// sequence the log no longer holds gets a snapshot instead. The job store keeps each job's last
// events too, written with the job's record (JobStoreWriter), so a restarted coordinator opens
// the log with them and a watcher that resumes across the restart misses none. Thread-safe.
#ifndef ZPIPE_COORDINATOR_JOB_EVENTS_H_
#define ZPIPE_COORDINATOR_JOB_EVENTS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

// A re-plan from measured costs (PlanSwitch in coordinator.proto).
struct PlanSwitchEvent {
  enum class Phase { kScheduled, kApplied, kAbandoned };
  Phase phase = Phase::kScheduled;
  int from_version = 0;
  int to_version = 0;
  int switch_iteration = 0;
  int measured_iteration = 0;
  double old_bubble = 0;  // both plans simulated at the measured costs
  double new_bubble = 0;
};

struct JobEvent {
  enum class Kind { kStateChange, kIteration, kPlanSwitch };
  uint64_t sequence = 0;
  absl::Time time;
  Kind kind = Kind::kStateChange;
  JobState from = JobState::kPending;  // state change
  JobState to = JobState::kPending;
  std::string reason;        // state change, plan switch
  IterationSummary summary;  // iteration
  PlanSwitchEvent plan_switch;
};

class JobEventLog {
 public:
  static constexpr size_t kRetained = 1024;

  // Starts (or restarts) a job's log at `last_sequence`, retaining `stored`: the job's last events
  // as the store kept them (after a coordinator restart), in sequence order, none after
  // `last_sequence`. Events before those happened but are not retained.
  void Open(const std::string& job_id, uint64_t last_sequence, std::vector<JobEvent> stored = {});
  void Append(const std::string& job_id, JobEvent event);

  // The retained events with sequence > after, at most the last `limit` of them (the store's
  // share of them when it has fallen behind further than the log retains).
  std::vector<JobEvent> Retained(const std::string& job_id, uint64_t after, size_t limit) const;

  // Sets *out to the retained events with sequence > after. Returns false when some of them are
  // no longer retained (or the job is unknown): the caller should send a snapshot instead.
  bool EventsAfter(const std::string& job_id, uint64_t after, std::vector<JobEvent>* out) const;

  // Blocks until the job has an event with sequence > after, `deadline` passes, or Close(). Returns
  // whether such an event exists.
  bool WaitForEventAfter(const std::string& job_id, uint64_t after, absl::Time deadline) const;

  // Drops the job's history (a deleted job): its events are gone, EventsAfter says so.
  void Forget(const std::string& job_id);

  // Wakes every waiter (server shutdown); later waits return at once.
  void Close();
  bool closed() const;

 private:
  struct Log {
    uint64_t first_retained = 1;  // sequence of events.front() (or the next one when empty)
    uint64_t last = 0;
    std::deque<JobEvent> events;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Log> logs_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_EVENTS_H_
