#include "coordinator/job_log_store.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace zpipe::coordinator {

int GlobalRank(const LogLineData& line, int pipeline_size) {
  if (line.pipeline_rank == JobLogStore::kJobRank) return JobLogStore::kJobRank;
  return line.data_rank * pipeline_size + line.pipeline_rank;
}

JobLogStore::JobLogStore(size_t lines_per_rank, size_t max_jobs)
    : lines_per_rank_(std::max<size_t>(1, lines_per_rank)),
      max_jobs_(std::max<size_t>(1, max_jobs)),
      first_sequence_(
          static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMicros(absl::Now())))) {}

void JobLogStore::Append(const std::string& job_id, int pipeline_rank, int data_rank,
                         std::vector<std::pair<absl::Time, std::string>> lines,
                         uint64_t dropped_by_worker) {
  if (pipeline_rank < 0 || pipeline_rank >= kMaxRank || data_rank < 0 || data_rank >= kMaxRank)
    return;
  if (lines.empty() && dropped_by_worker == 0) return;
  absl::MutexLock lock(&mu_);
  AppendLocked(job_id, {pipeline_rank, data_rank}, std::move(lines), dropped_by_worker);
}

void JobLogStore::AppendJobLine(const std::string& job_id, absl::Time time, std::string text) {
  std::vector<std::pair<absl::Time, std::string>> lines;
  lines.emplace_back(time, std::move(text));
  absl::MutexLock lock(&mu_);
  AppendLocked(job_id, {kJobRank, kJobRank}, std::move(lines), 0);
}

void JobLogStore::AppendLocked(const std::string& job_id, std::pair<int, int> key,
                               std::vector<std::pair<absl::Time, std::string>> lines,
                               uint64_t dropped_by_worker) {
  if (!jobs_.contains(job_id) && jobs_.size() >= max_jobs_) {
    auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
      return a.second.touched < b.second.touched;
    });
    jobs_.erase(oldest);
  }
  auto [it, added] = jobs_.try_emplace(job_id);
  JobLog& job = it->second;
  if (added) job.last_sequence = first_sequence_;
  job.touched = ++clock_;
  RankLog& rank = job.ranks[key];
  rank.dropped += dropped_by_worker;
  for (auto& [time, text] : lines) {
    LogLineData& line = rank.lines.emplace_back();
    line.time = time;
    line.text = std::move(text);
    line.pipeline_rank = key.first;
    line.data_rank = key.second;
    line.sequence = ++job.last_sequence;
    if (rank.lines.size() > lines_per_rank_) {
      rank.lines.pop_front();
      ++rank.dropped;
    }
  }
}

LogRead JobLogStore::Read(const std::string& job_id, const LogQuery& query) const {
  LogRead out;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return out;
  const JobLog& job = it->second;
  out.last_sequence = job.last_sequence;
  for (const auto& [key, rank] : job.ranks) {
    if (query.rank.has_value() && *query.rank != key) continue;
    out.dropped += rank.dropped;
    for (const LogLineData& line : rank.lines) {
      if (line.sequence > query.after_sequence && line.time >= query.since) {
        out.lines.push_back(line);
      }
    }
  }
  std::sort(out.lines.begin(), out.lines.end(),
            [](const LogLineData& a, const LogLineData& b) { return a.sequence < b.sequence; });
  if (query.tail > 0 && out.lines.size() > static_cast<size_t>(query.tail)) {
    out.lines.erase(out.lines.begin(), out.lines.end() - query.tail);
  }
  return out;
}

bool JobLogStore::WaitForLinesAfter(const std::string& job_id, uint64_t after,
                                    absl::Time deadline) const {
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (closed_) return true;
    auto it = jobs_.find(job_id);
    return it != jobs_.end() && it->second.last_sequence > after;
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && it->second.last_sequence > after;
}

void JobLogStore::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

void JobLogStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace zpipe::coordinator
