#include "coordinator/trace_store.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {

void ClockOffsetEstimator::AddSample(absl::Time received, double worker_time_s) {
  const double sample = absl::ToDoubleSeconds(received - absl::UnixEpoch()) - worker_time_s;
  samples_.emplace_back(received, sample);
  while (samples_.size() > kMaxSamples ||
         (!samples_.empty() && received - samples_.front().first > kWindow)) {
    samples_.pop_front();
  }
}

ClockOffset ClockOffsetEstimator::Estimate() const {
  ClockOffset out;
  if (samples_.empty()) return out;
  out.offset_s = samples_.front().second;
  for (const auto& [received, sample] : samples_) out.offset_s = std::min(out.offset_s, sample);
  out.samples = static_cast<int>(samples_.size());
  return out;
}

void TraceStore::StartJob(const std::string& job_id, const core::Plan& plan,
                          const std::vector<RankSlot>& ranks) {
  auto job = std::make_shared<Job>();
  job->pipeline = std::max(1, plan.num_ranks());
  for (const RankSlot& slot : ranks) {
    auto rank = std::make_unique<RankState>();
    rank->slot = slot;
    if (slot.pipeline_rank >= 0 && slot.pipeline_rank < static_cast<int>(plan.ranks.size())) {
      for (const core::Action& a : plan.ranks[slot.pipeline_rank]) {
        if (core::IsCompute(a.kind)) ++rank->expected_compute;
        if (core::IsComm(a.kind)) ++rank->expected_comm;
      }
    }
    job->ranks.push_back(std::move(rank));
  }
  absl::MutexLock lock(&mu_);
  jobs_[job_id] = std::move(job);
  start_order_.erase(std::remove(start_order_.begin(), start_order_.end(), job_id),
                     start_order_.end());
  start_order_.push_back(job_id);
  while (start_order_.size() > kMaxJobs) {
    jobs_.erase(start_order_.front());
    start_order_.pop_front();
  }
}

std::shared_ptr<TraceStore::Job> TraceStore::Find(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

void TraceStore::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
  start_order_.erase(std::remove(start_order_.begin(), start_order_.end(), job_id),
                     start_order_.end());
}

void TraceStore::AddActions(const std::string& job_id, const std::string& worker_name,
                            int pipeline_rank, int data_rank, absl::Span<const int32_t> iterations,
                            absl::Span<const core::Action> actions,
                            absl::Span<const double> start_s, absl::Span<const double> end_s) {
  const size_t n = iterations.size();
  if (n == 0 || actions.size() != n || start_s.size() != n || end_s.size() != n) return;
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return;
  const size_t g = static_cast<size_t>(data_rank) * job->pipeline + pipeline_rank;
  if (pipeline_rank < 0 || pipeline_rank >= job->pipeline || data_rank < 0 ||
      g >= job->ranks.size()) {
    return;
  }
  RankState& rank = *job->ranks[g];
  if (rank.slot.worker_name != worker_name) return;
  absl::MutexLock lock(&rank.mu);
  for (size_t k = 0; k < n; ++k) {
    const int it = iterations[k];
    if (it < 0) continue;
    if (!rank.iterations.empty() && it <= rank.iterations.rbegin()->first - kKeepIterations) {
      continue;  // older than what we keep
    }
    std::vector<core::TimedAction>& v = rank.iterations[it];
    if (v.size() < kMaxActionsPerIteration) v.push_back({actions[k], start_s[k], end_s[k]});
  }
  while (static_cast<int>(rank.iterations.size()) > kKeepIterations) {
    rank.iterations.erase(rank.iterations.begin());
  }
}

void TraceStore::ObserveClock(const std::string& worker_name, absl::Time received,
                              double worker_time_s) {
  absl::MutexLock lock(&clock_mu_);
  clocks_[worker_name].AddSample(received, worker_time_s);
}

ClockOffset TraceStore::Offset(const std::string& worker_name) const {
  absl::ReaderMutexLock lock(&clock_mu_);
  auto it = clocks_.find(worker_name);
  return it == clocks_.end() ? ClockOffset{} : it->second.Estimate();
}

absl::StatusOr<JobTrace> TraceStore::Get(const std::string& job_id,
                                         std::optional<int> iteration) const {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("job '", job_id,
                                            "' has no executed timeline (not run since the "
                                            "coordinator started)"));
  }
  // Which iterations exist on any rank, and which are complete on every rank.
  std::set<int> available;
  std::map<int, int> complete_ranks;
  for (const auto& rank : job->ranks) {
    absl::ReaderMutexLock lock(&rank->mu);
    for (const auto& [it, actions] : rank->iterations) {
      available.insert(it);
      int compute = 0, comm = 0;
      for (const core::TimedAction& a : actions) {
        compute += core::IsCompute(a.action.kind);
        comm += core::IsComm(a.action.kind);
      }
      // A worker that reports no communication (an older one) completes on compute alone.
      if (compute >= rank->expected_compute && (comm == 0 || comm >= rank->expected_comm)) {
        ++complete_ranks[it];
      }
    }
  }
  auto is_complete = [&](int it) {
    auto c = complete_ranks.find(it);
    return c != complete_ranks.end() && c->second == static_cast<int>(job->ranks.size());
  };
  JobTrace out;
  out.available_iterations.assign(available.begin(), available.end());
  if (iteration.has_value()) {
    if (!available.contains(*iteration)) {
      return absl::NotFoundError(absl::StrCat("job '", job_id, "': iteration ", *iteration,
                                              " is not held (the coordinator keeps the last ",
                                              kKeepIterations, " iterations)"));
    }
    out.iteration = *iteration;
  } else {
    bool found = false;
    for (auto it = available.rbegin(); it != available.rend(); ++it) {
      if (is_complete(*it)) {
        out.iteration = *it;
        found = true;
        break;
      }
    }
    if (!found) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' has no complete iteration yet"));
    }
  }
  out.complete = is_complete(out.iteration);
  for (const auto& rank : job->ranks) {
    TracedRank traced;
    traced.slot = rank->slot;
    traced.clock = Offset(rank->slot.worker_name);
    {
      absl::ReaderMutexLock lock(&rank->mu);
      auto it = rank->iterations.find(out.iteration);
      if (it != rank->iterations.end()) traced.actions = it->second;
    }
    for (core::TimedAction& a : traced.actions) {
      a.start += traced.clock.offset_s;
      a.end += traced.clock.offset_s;
    }
    out.ranks.push_back(std::move(traced));
  }
  return out;
}

}  // namespace zpipe::coordinator
