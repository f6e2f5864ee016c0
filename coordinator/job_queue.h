// JobQueue: the coordinator's jobs in submission order, and the order in which waiting jobs get
// workers. It owns the job records (by submit_order, with an index by id) and the queueing
// policy; what it takes to start a job (finding workers, planning, sending assignments) is the
// caller's, passed to Schedule as `admit`.
//
// Policy: FIFO per device kind. PENDING and RESTARTING jobs are offered to `admit` oldest first;
// when one must wait, every later job of its device kind waits behind it (so a big job is not
// starved by smaller ones), while jobs of other device kinds go on.
//
// Not thread-safe: the owner serializes every call (JobLifecycle guards it with its lock).
// Records live until they are removed (a deleted job) or the queue is destroyed; pointers and
// references to the others stay valid.
#ifndef ZPIPE_COORDINATOR_JOB_QUEUE_H_
#define ZPIPE_COORDINATOR_JOB_QUEUE_H_

#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

// Which jobs a listing wants (ListJobsRequest); every part that is set must match.
struct JobFilter {
  std::set<JobState> states{};                      // empty = any state
  std::map<std::string, std::string> labels{};      // each with this value (JobSpec.labels)
  absl::Time created_after = absl::InfinitePast();  // created at or after

  bool Matches(const JobRecord& job) const;
};

class JobQueue {
 public:
  using Jobs = std::map<int64_t, JobRecord>;  // by submit_order

  // The submit_order for a new job (each call hands out the next one).
  int64_t NextSubmitOrder() { return next_submit_order_++; }
  // Adds `record` under its id and submit_order (new, or restored from the store: later orders
  // are then handed out after it). The id must not be present.
  JobRecord& Add(JobRecord record);

  // Removes the job's record (a deleted job); pointers to it dangle. False when it is unknown.
  bool Remove(const std::string& job_id);

  JobRecord* Find(const std::string& job_id);
  const JobRecord* Find(const std::string& job_id) const;
  // Every job, oldest first.
  Jobs& all() { return jobs_; }
  const Jobs& all() const { return jobs_; }

  // Up to `page_size` jobs submitted after `after` (a submit_order; 0 = from the start) that
  // `filter` matches, oldest first; `*more` says whether others follow.
  std::vector<const JobRecord*> Page(const JobFilter& filter, int64_t after, int page_size,
                                     bool* more) const;
  int PendingCount() const;
  // How many PENDING jobs of `job`'s device kind are ahead of PENDING `job`.
  int QueuePosition(const JobRecord& job) const;
  // Jobs per JobState (indexed by its value).
  std::array<int64_t, std::size(kAllJobStates)> CountByState() const;
  // The SCHEDULING or RUNNING job with a rank on `worker_name` (the latest submitted, should
  // there be several) and that rank; {nullptr, nullptr} when none.
  std::pair<JobRecord*, const RankSlot*> ActiveRankOf(const std::string& worker_name);

  // Offers waiting jobs to `admit` in queue order (see the file comment). `admit` starts the job
  // or ends it and returns true, or returns false when it must wait for workers. Jobs it changes
  // stay in the queue; `admit` must not add jobs.
  void Schedule(absl::FunctionRef<bool(JobRecord&)> admit);

 private:
  Jobs jobs_;
  absl::flat_hash_map<std::string, int64_t> index_;  // id -> submit_order
  int64_t next_submit_order_ = 1;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_QUEUE_H_
