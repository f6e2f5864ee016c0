#include "coordinator/job_store_writer.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace zpipe::coordinator {

absl::Status JobStoreWriter::Put(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  return PutLocked(job);
}

absl::Status JobStoreWriter::PutNew(const JobRecord& job) {
  absl::Status st = store_.Put(job, {});
  if (!st.ok()) metrics_.CountStoreWriteError();
  return st;
}

absl::Status JobStoreWriter::PutLocked(const JobRecord& job) {
  // The events since the last stored write; after a restart, the ones the log holds (rewriting
  // an event already stored replaces it with itself).
  auto stored = stored_sequence_.find(job.id);
  const std::vector<JobEvent> events = events_.Retained(
      job.id, stored == stored_sequence_.end() ? 0 : stored->second, JobStore::kStoredEvents);
  absl::Status st = store_.Put(job, events);
  if (st.ok()) {
    stored_sequence_[job.id] = job.last_sequence;
    if (unsaved_.erase(job.id) > 0 && unsaved_.empty()) {
      LogInfo("job store: writes succeed again; every job change is stored");
      error_ = absl::OkStatus();
    }
    metrics_.SetStoreUnsavedJobs(static_cast<int64_t>(unsaved_.size()));
    return st;
  }
  metrics_.CountStoreWriteError();
  if (unsaved_.insert(job.id).second) {
    // Once per job, not per retry: the retries repeat it every liveness check.
    LogError("job ", job.id, ": store write failed (", st.ToString(),
             "); kept in memory and written again until the store takes it");
  }
  error_ = st;
  metrics_.SetStoreUnsavedJobs(static_cast<int64_t>(unsaved_.size()));
  return st;
}

absl::Status JobStoreWriter::Delete(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  absl::Status st = store_.Delete(job_id);
  if (!st.ok()) {
    metrics_.CountStoreWriteError();
    return st;
  }
  stored_sequence_.erase(job_id);
  if (unsaved_.erase(job_id) > 0 && unsaved_.empty()) error_ = absl::OkStatus();
  metrics_.SetStoreUnsavedJobs(static_cast<int64_t>(unsaved_.size()));
  return st;
}

absl::Status JobStoreWriter::RetryUnsaved(
    absl::FunctionRef<const JobRecord*(const std::string&)> find) {
  absl::MutexLock lock(&mu_);
  const std::vector<std::string> ids(unsaved_.begin(), unsaved_.end());
  for (const std::string& id : ids) {
    const JobRecord* job = find(id);
    if (job == nullptr) {
      unsaved_.erase(id);
      stored_sequence_.erase(id);
      continue;
    }
    if (absl::Status st = PutLocked(*job); !st.ok()) return StatusLocked();
  }
  return StatusLocked();
}

void JobStoreWriter::Stored(const std::string& job_id, uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  stored_sequence_[job_id] = sequence;
}

bool JobStoreWriter::HasUnsaved() const {
  absl::ReaderMutexLock lock(&mu_);
  return !unsaved_.empty();
}

bool JobStoreWriter::IsUnsaved(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return unsaved_.contains(job_id);
}

absl::Status JobStoreWriter::Status() const {
  absl::ReaderMutexLock lock(&mu_);
  return StatusLocked();
}

absl::Status JobStoreWriter::StatusLocked() const {
  if (unsaved_.empty()) return absl::OkStatus();
  const std::string what = absl::StrCat(
      unsaved_.size(),
      unsaved_.size() == 1 ? " job's latest change waits" : " jobs' latest changes wait",
      " to be written (", error_.message(), ")");
  if (absl::IsResourceExhausted(error_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the coordinator's job store is full: ", what,
        "; new jobs are refused until it takes writes again. Free space on the disk of the "
        "coordinator's --db"));
  }
  return absl::UnavailableError(absl::StrCat("the coordinator's job store refuses writes: ", what,
                                             "; new jobs are refused until it takes writes again"));
}

}  // namespace zpipe::coordinator
