// JobStore: durable job records, so every job is still listed after a coordinator restart.
//
// The job manager keeps all records in memory and writes through on every change; the store is
// read once, at startup. With each record go the job's new events (state changes, iteration
// summaries, plan switches), in the same write: the store keeps each job's last kStoredEvents,
// so a watcher resuming across a coordinator restart gets every event it missed. Implementations
// are thread-safe.
#ifndef ZPIPE_COORDINATOR_JOB_STORE_H_
#define ZPIPE_COORDINATOR_JOB_STORE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"

namespace zpipe::coordinator {

class JobStore {
 public:
  // Events kept per job: a watcher away longer than this many events gets a snapshot.
  static constexpr size_t kStoredEvents = 256;

  virtual ~JobStore() = default;
  // Inserts the record, or replaces the one with the same id, and adds `events` (the job's events
  // not written before, in sequence order; one written before is replaced), all or nothing.
  // ResourceExhausted when the store is full (no space left); other errors for other failures. A
  // failed Put changes nothing.
  virtual absl::Status Put(const JobRecord& job, absl::Span<const JobEvent> events) = 0;
  // Removes the job's record and events; OK when there is none. A failed Delete changes nothing.
  virtual absl::Status Delete(const std::string& job_id) = 0;
  // Every stored job, ordered by submit_order.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadAll() = 0;
  // The job's stored events in sequence order: its last kStoredEvents at most.
  virtual absl::StatusOr<std::vector<JobEvent>> LoadEvents(const std::string& job_id) = 0;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_STORE_H_
