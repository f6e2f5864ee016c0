#include "coordinator/job_events.h"

#include <cstddef>

namespace zpipe::coordinator {

void JobEventLog::Open(const std::string& job_id, uint64_t last_sequence,
                       std::vector<JobEvent> stored) {
  absl::MutexLock lock(&mu_);
  Log& log = logs_[job_id];
  log.events.clear();
  log.last = last_sequence;
  log.first_retained = last_sequence + 1;
  // Only a gap-free run that ends at last_sequence can answer EventsAfter: keep the longest one.
  uint64_t expected = last_sequence;
  size_t first = stored.size();
  while (first > 0 && stored[first - 1].sequence == expected && expected > 0) {
    --first;
    --expected;
  }
  if (stored.size() - first > kRetained) first = stored.size() - kRetained;
  for (size_t i = first; i < stored.size(); ++i) log.events.push_back(std::move(stored[i]));
  if (!log.events.empty()) log.first_retained = log.events.front().sequence;
}

void JobEventLog::Append(const std::string& job_id, JobEvent event) {
  absl::MutexLock lock(&mu_);
  Log& log = logs_[job_id];
  if (log.events.empty()) log.first_retained = event.sequence;
  log.last = event.sequence;
  log.events.push_back(std::move(event));
  if (log.events.size() > kRetained) {
    log.events.pop_front();
    log.first_retained = log.events.front().sequence;
  }
}

bool JobEventLog::EventsAfter(const std::string& job_id, uint64_t after,
                              std::vector<JobEvent>* out) const {
  out->clear();
  absl::MutexLock lock(&mu_);
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return false;
  const Log& log = it->second;
  if (after >= log.last) return after == log.last;
  if (after + 1 < log.first_retained) return false;
  for (const JobEvent& e : log.events) {
    if (e.sequence > after) out->push_back(e);
  }
  return true;
}

std::vector<JobEvent> JobEventLog::Retained(const std::string& job_id, uint64_t after,
                                            size_t limit) const {
  std::vector<JobEvent> out;
  absl::MutexLock lock(&mu_);
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return out;
  const std::deque<JobEvent>& events = it->second.events;
  size_t first = events.size();
  while (first > 0 && events[first - 1].sequence > after && events.size() - first < limit) --first;
  out.assign(events.begin() + static_cast<std::ptrdiff_t>(first), events.end());
  return out;
}

bool JobEventLog::WaitForEventAfter(const std::string& job_id, uint64_t after,
                                    absl::Time deadline) const {
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (closed_) return true;
    auto it = logs_.find(job_id);
    return it != logs_.end() && it->second.last > after;
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  auto it = logs_.find(job_id);
  return it != logs_.end() && it->second.last > after;
}

bool JobEventLog::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

void JobEventLog::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  logs_.erase(job_id);
}

void JobEventLog::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace zpipe::coordinator
