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
  jobs_.erase(job_id);
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
  if (!it->second.contains(key) && it->second.size() >= kMaxKeysPerJob) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", job_id, "' already holds ", kMaxKeysPerJob, " rendezvous keys"));
  }
  it->second[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Rendezvous::Get(const std::string& job_id,
                                            const std::string& key) const {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotOpen(job_id);
  auto kv = it->second.find(key);
  if (kv == it->second.end()) {
    return absl::NotFoundError(absl::StrCat("key '", key, "' not set for job '", job_id, "'"));
  }
  return kv->second;
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
  auto ready = [&]() {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      closed = true;
      return true;
    }
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return it->second.contains(k); });
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
  const Keys& kv = jobs_.at(job_id);
  for (const auto& key : keys) values.push_back(kv.at(key));
  return values;
}

}  // namespace zpipe::coordinator
