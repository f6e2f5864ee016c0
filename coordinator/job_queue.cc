// JobQueue: job records in submission order and FIFO-per-device-kind scheduling order.
#include "coordinator/job_queue.h"

#include <algorithm>

namespace zpipe::coordinator {

JobRecord& JobQueue::Add(JobRecord record) {
  const int64_t order = record.submit_order;
  next_submit_order_ = std::max(next_submit_order_, order + 1);
  index_[record.id] = order;
  return jobs_[order] = std::move(record);
}

bool JobQueue::Remove(const std::string& job_id) {
  auto it = index_.find(job_id);
  if (it == index_.end()) return false;
  jobs_.erase(it->second);
  index_.erase(it);
  return true;
}

JobRecord* JobQueue::Find(const std::string& job_id) {
  auto it = index_.find(job_id);
  return it == index_.end() ? nullptr : &jobs_.at(it->second);
}

const JobRecord* JobQueue::Find(const std::string& job_id) const {
  auto it = index_.find(job_id);
  return it == index_.end() ? nullptr : &jobs_.at(it->second);
}

bool JobFilter::Matches(const JobRecord& job) const {
  if (!states.empty() && !states.contains(job.state)) return false;
  if (job.create_time < created_after) return false;
  for (const auto& [key, value] : labels) {
    auto it = job.spec.labels.find(key);
    if (it == job.spec.labels.end() || it->second != value) return false;
  }
  return true;
}

std::vector<const JobRecord*> JobQueue::Page(const JobFilter& filter, int64_t after,
                                             int page_size, bool* more) const {
  std::vector<const JobRecord*> page;
  *more = false;
  for (auto it = jobs_.upper_bound(after); it != jobs_.end(); ++it) {
    const JobRecord& job = it->second;
    if (!filter.Matches(job)) continue;
    if (static_cast<int>(page.size()) == page_size) {
      *more = true;
      break;
    }
    page.push_back(&job);
  }
  return page;
}

int JobQueue::PendingCount() const {
  return static_cast<int>(std::count_if(jobs_.begin(), jobs_.end(), [](const auto& entry) {
    return entry.second.state == JobState::kPending;
  }));
}

int JobQueue::QueuePosition(const JobRecord& job) const {
  int ahead = 0;
  for (const auto& [order, other] : jobs_) {
    if (order >= job.submit_order) break;
    if (other.state == JobState::kPending && other.spec.device == job.spec.device) ++ahead;
  }
  return ahead;
}

std::array<int64_t, std::size(kAllJobStates)> JobQueue::CountByState() const {
  std::array<int64_t, std::size(kAllJobStates)> counts = {};
  for (const auto& [order, job] : jobs_) ++counts[static_cast<int>(job.state)];
  return counts;
}

std::pair<JobRecord*, const RankSlot*> JobQueue::ActiveRankOf(const std::string& worker_name) {
  std::pair<JobRecord*, const RankSlot*> held = {nullptr, nullptr};
  for (auto& [order, job] : jobs_) {
    if (job.state != JobState::kScheduling && job.state != JobState::kRunning) continue;
    for (const RankSlot& slot : job.ranks) {
      if (slot.worker_name == worker_name) held = {&job, &slot};
    }
  }
  return held;
}

void JobQueue::Schedule(absl::FunctionRef<bool(JobRecord&)> admit) {
  std::set<DeviceKind> blocked;  // FIFO per device kind: the oldest job blocks the later ones
  for (auto& [order, job] : jobs_) {
    if (job.state != JobState::kPending && job.state != JobState::kRestarting) continue;
    if (blocked.contains(job.spec.device)) continue;
    if (!admit(job)) blocked.insert(job.spec.device);
  }
}

}  // namespace zpipe::coordinator
