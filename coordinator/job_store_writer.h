// JobStoreWriter: writes job changes to the JobStore and keeps track of the ones it refused, so
// that nothing acknowledged is lost when the store fails (a full disk).
//
// A change the store refuses stays in memory (the caller's job record) and its job is marked
// unsaved; RetryUnsaved (the liveness loop) writes every unsaved job again until the store takes
// it. Meanwhile Status() is an error (/readyz fails, the zpipe_store_unsaved_jobs gauge is
// non-zero, the log says so once per job), so new jobs are refused with it (ResourceExhausted when
// the store is full) and a cancel is not acknowledged until it is stored.
//
// Each write carries the job's events appended to `events` since its last stored write, so the
// store holds a job's record and its events as of one moment (JobStore::Put).
//
// Thread-safe, with its own lock, which is a leaf: it is taken after JobLifecycle's (callers
// write records they hold under that lock) and nothing else is locked under it but the store, the
// event log and the metrics. `store`, `events` and `metrics` are injected and must outlive the
// writer.
#ifndef ZPIPE_COORDINATOR_JOB_STORE_WRITER_H_
#define ZPIPE_COORDINATOR_JOB_STORE_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/domain.h"
#include "coordinator/job_events.h"
#include "coordinator/job_store.h"
#include "coordinator/metrics.h"

namespace zpipe::coordinator {

class JobStoreWriter {
 public:
  JobStoreWriter(JobStore& store, const JobEventLog& events, Metrics& metrics)
      : store_(store), events_(events), metrics_(metrics) {}

  // Writes `job` with its events not stored yet; when the store refuses, marks it unsaved
  // (RetryUnsaved writes it again, events included) and returns the store's error.
  absl::Status Put(const JobRecord& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes a job that does not exist yet: a refusal is counted but not kept (the caller forgets
  // the job), and the store's error is returned as it is.
  absl::Status PutNew(const JobRecord& job);
  // Removes the job from the store, and from the unsaved jobs once the store took it. Returns the
  // store's error (the job is then still stored, and unsaved if it was).
  absl::Status Delete(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes every unsaved job again, looking each up with `find` (null: forgotten, dropped). OK
  // when none is left, else Status(). `find` runs under this writer's lock.
  absl::Status RetryUnsaved(absl::FunctionRef<const JobRecord*(const std::string&)> find)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The store holds `job_id`'s events up to `sequence` (loaded at startup): later writes carry
  // only the ones after it.
  void Stored(const std::string& job_id, uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);

  bool HasUnsaved() const ABSL_LOCKS_EXCLUDED(mu_);
  bool IsUnsaved(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // OK while every job change is stored; else the store's error (ResourceExhausted when it is
  // full) saying how many jobs wait to be written.
  absl::Status Status() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status PutLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StatusLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  JobStore& store_;
  const JobEventLog& events_;
  Metrics& metrics_;
  mutable absl::Mutex mu_;
  // Jobs whose latest change the store refused, and its latest error (OK when none).
  absl::flat_hash_set<std::string> unsaved_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Per job, the last event sequence the store took (absent: none known since this start).
  absl::flat_hash_map<std::string, uint64_t> stored_sequence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_JOB_STORE_WRITER_H_
