#include "coordinator/rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zpipe::coordinator {
namespace {

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  if (key.size() > Rendezvous::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: must be at most ", Rendezvous::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status NotOpen(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job '", job_id, "' has no rendezvous store"));
}

}  // namespace

void Rendezvous::Open(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.try_emplace(job_id);
}

void Rendezvous::Close(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  total_bytes_ -= it->second.bytes;
  jobs_.erase(it);
}

bool Rendezvous::IsOpen(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return jobs_.contains(job_id);
}

absl::Status Rendezvous::Set(const std::string& job_id, const std::string& key, std::string value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: must be at most ", kMaxValueBytes, " bytes, got ", value.size()));
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotOpen(job_id);
  Keys& job = it->second;
  auto old = job.values.find(key);
  const bool is_new = old == job.values.end();
  if (is_new && job.values.size() >= limits_.job_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous quota of job '", job_id, "': ", limits_.job_keys,
                     " keys (the --rendezvous-job-keys limit); the job already holds that many"));
  }
  const size_t freed = is_new ? 0 : key.size() + old->second.size();
  const size_t bytes = job.bytes - freed + key.size() + value.size();
  if (bytes > limits_.job_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous quota of job '", job_id, "': ", limits_.job_bytes,
        " bytes of keys and values (the --rendezvous-job-bytes limit); it holds ", job.bytes,
        " and this write of ", key.size() + value.size(), " would exceed it"));
  }
  const size_t total = total_bytes_ - job.bytes + bytes;
  if (bytes > job.bytes && total > limits_.total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous store of the coordinator: ", limits_.total_bytes,
        " bytes of keys and values across all jobs (the --rendezvous-total-bytes limit); they hold ",
        total_bytes_, " and this write of ", key.size() + value.size(),
        " would exceed it; wait for other jobs to end or raise the limit"));
  }
  total_bytes_ = total;
  job.bytes = bytes;
  if (is_new) {
    job.values.emplace(key, std::move(value));
  } else {
    old->second = std::move(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Rendezvous::Get(const std::string& job_id,
                                            const std::string& key) const {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotOpen(job_id);
  auto kv = it->second.values.find(key);
  if (kv == it->second.values.end()) {
    return absl::NotFoundError(absl::StrCat("key '", key, "' not set for job '", job_id, "'"));
  }
  return kv->second;
}

size_t Rendezvous::JobBytes(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? 0 : it->second.bytes;
}

size_t Rendezvous::TotalBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return total_bytes_;
}

absl::StatusOr<std::vector<std::string>> Rendezvous::Wait(
    const std::string& job_id, const std::vector<std::string>& keys, absl::Time deadline,
    const std::function<bool()>& cancelled) const {
  if (keys.empty() || keys.size() > kMaxWaitKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: must name 1..", kMaxWaitKeys, " keys, got ", keys.size()));
  }
  for (const auto& key : keys) {
    if (absl::Status st = CheckKey(key); !st.ok()) return st;
  }
  bool closed = false;
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      closed = true;
      return true;
    }
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return it->second.values.contains(k); });
  };
  absl::MutexLock lock(&mu_);
  if (!jobs_.contains(job_id)) return NotOpen(job_id);
  while (true) {
    const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(50));
    if (mu_.AwaitWithDeadline(absl::Condition(&ready), slice)) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous wait for ", keys.size(), " key(s) of job '", job_id,
                       "' timed out (first key '", keys.front(), "')"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("rendezvous wait cancelled");
  }
  if (closed) {
    return absl::CancelledError(
        absl::StrCat("job '", job_id, "' ended while waiting for rendezvous keys"));
  }
  std::vector<std::string> values;
  const auto& kv = jobs_.at(job_id).values;
  for (const auto& key : keys) values.push_back(kv.at(key));
  return values;
}

}  // namespace zpipe::coordinator
