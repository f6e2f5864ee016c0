// JobStore: durable job records, so every job is still listed after a coordinator restart.
//
// The job manager keeps all records in memory and writes through on every change; the store is
// read once, at startup. Implementations are thread-safe.
#ifndef ZPIPE_COORDINATOR_JOB_STORE_H_
#define ZPIPE_COORDINATOR_JOB_STORE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

class JobStore {
 public:
  virtual ~JobStore() = default;
  // Inserts the record, or replaces the one with the same id. ResourceExhausted when the store
  // is full (no space left); other errors for other failures. A failed Put changes nothing.
  virtual absl::Status Put(const JobRecord& job) = 0;
  // Removes the job's record; OK when there is none. A failed Delete changes nothing.
  virtual absl::Status Delete(const std::string& job_id) = 0;
  // Every stored job, ordered by submit_order.
  virtual absl::StatusOr<std::vector<JobRecord>> LoadAll() = 0;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_STORE_H_
