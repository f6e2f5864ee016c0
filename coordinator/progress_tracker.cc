#include "coordinator/progress_tracker.h"

#include <algorithm>
#include <optional>

#include "wire/compute_op.h"

namespace zpipe::coordinator {

void ProgressTracker::StartJob(const std::string& job_id, const core::Placement& placement,
                               int microbatches, int iterations, double predicted_bubble,
                               const std::vector<RankSlot>& ranks, int iterations_done) {
  auto job = std::make_shared<Job>();
  {
    absl::MutexLock lock(&job->reports_mu);
    job->iterations_done = iterations_done;
    job->predicted_bubble = predicted_bubble;
  }
  job->placement = placement;
  job->m = microbatches;
  job->iterations = iterations;
  const size_t per_rank = static_cast<size_t>(placement.chunks_per_rank()) * microbatches;
  for (const RankSlot& slot : ranks) {
    auto rank = std::make_unique<RankState>();
    rank->slot = slot;
    rank->phases = std::make_unique<std::atomic<uint8_t>[]>(per_rank);
    rank->num_phases = per_rank;
    rank->iteration.store(iterations_done, std::memory_order_relaxed);
    rank->iterations_done.store(iterations_done, std::memory_order_relaxed);
    for (size_t i = 0; i < per_rank; ++i) rank->phases[i].store(0, std::memory_order_relaxed);
    job->ranks.push_back(std::move(rank));
  }
  absl::MutexLock lock(&mu_);
  jobs_[job_id] = std::move(job);
}

void ProgressTracker::SetPredictedBubble(const std::string& job_id, double predicted_bubble) {
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return;
  absl::MutexLock lock(&job->reports_mu);
  job->predicted_bubble = predicted_bubble;
}

void ProgressTracker::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

std::shared_ptr<ProgressTracker::Job> ProgressTracker::Find(const std::string& job_id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

int ProgressTracker::AddEvents(const std::string& job_id, const std::string& worker_name,
                               int pipeline_rank, int data_rank, const ProgressEvents& ev) {
  const size_t n = ev.iterations.size();
  std::shared_ptr<Job> job = Find(job_id);
  const int p = job ? job->placement.num_ranks() : 0;
  if (!job || ev.ops.size() != n || ev.stages.size() != n || ev.microbatches.size() != n ||
      pipeline_rank < 0 || pipeline_rank >= p || data_rank < 0 ||
      static_cast<size_t>(data_rank * p + pipeline_rank) >= job->ranks.size()) {
    dropped_.fetch_add(n, std::memory_order_relaxed);
    return 0;
  }
  RankState& rank = *job->ranks[data_rank * p + pipeline_rank];
  if (rank.slot.worker_name != worker_name) {
    dropped_.fetch_add(n, std::memory_order_relaxed);
    return 0;
  }
  constexpr auto kRelaxed = std::memory_order_relaxed;
  int applied = 0;
  int skipped = 0;  // timeline-only events: not progress, not dropped
  {
    absl::MutexLock lock(&rank.mu);
    int current = rank.iteration.load(kRelaxed);
    int f = rank.f.load(kRelaxed), b = rank.b.load(kRelaxed), w = rank.w.load(kRelaxed);
    for (size_t i = 0; i < n; ++i) {
      const std::optional<core::ActionKind> kind = wire::ActionKindOf(ev.ops[i]);
      if (kind && !core::IsCompute(*kind)) {  // timeline only
        ++skipped;
        continue;
      }
      const int it = ev.iterations[i], stage = ev.stages[i], mb = ev.microbatches[i];
      if (it < current || it >= job->iterations || mb < 0 || mb >= job->m || stage < 0 ||
          stage >= job->placement.num_stages() || job->placement.RankOf(stage) != pipeline_rank) {
        continue;
      }
      if (!kind) continue;  // an op this build does not know: dropped
      if (it > current) {
        current = it;
        f = b = w = 0;
        for (size_t k = 0; k < rank.num_phases; ++k) rank.phases[k].store(0, kRelaxed);
        rank.iteration.store(current, kRelaxed);
      }
      std::atomic<uint8_t>& phase = rank.phases[job->placement.ChunkOf(stage) * job->m + mb];
      uint8_t next = phase.load(kRelaxed);
      switch (*kind) {
        case core::ActionKind::kForward:
          ++f;
          next = std::max<uint8_t>(next, static_cast<uint8_t>(Phase::kForward));
          break;
        case core::ActionKind::kBackwardInput:
          ++b;
          next = std::max<uint8_t>(next, static_cast<uint8_t>(Phase::kBackward));
          break;
        case core::ActionKind::kBackwardWeight:
          ++w;
          next = static_cast<uint8_t>(Phase::kDone);
          break;
        case core::ActionKind::kBackwardFull:
          ++b;
          ++w;
          next = static_cast<uint8_t>(Phase::kDone);
          break;
        default:
          break;
      }
      phase.store(next, kRelaxed);
      ++applied;
    }
    rank.f.store(f, kRelaxed);
    rank.b.store(b, kRelaxed);
    rank.w.store(w, kRelaxed);
  }
  if (applied + skipped < static_cast<int>(n)) {
    dropped_.fetch_add(n - applied - skipped, std::memory_order_relaxed);
  }
  if (applied > 0) job->version.fetch_add(1, std::memory_order_relaxed);
  return applied;
}

std::vector<IterationSummary> ProgressTracker::AddReport(const std::string& job_id,
                                                         const std::string& worker_name,
                                                         int iteration, const RankStats& stats,
                                                         std::optional<double> loss,
                                                         std::optional<double> eval_loss,
                                                         absl::Time now, bool* repeated) {
  std::vector<IterationSummary> out;
  if (repeated != nullptr) *repeated = false;
  std::shared_ptr<Job> job = Find(job_id);
  if (!job) return out;
  const int p = job->placement.num_ranks();
  const int world = static_cast<int>(job->ranks.size());
  const int g = stats.data_rank * p + stats.pipeline_rank;
  if (stats.pipeline_rank < 0 || stats.pipeline_rank >= p || stats.data_rank < 0 || g >= world ||
      iteration < 0 || iteration >= job->iterations) {
    return out;
  }
  RankState& rank = *job->ranks[g];
  if (rank.slot.worker_name != worker_name) return out;
  {
    absl::MutexLock lock(&rank.mu);
    rank.iterations_done.store(std::max(rank.iterations_done.load(), iteration + 1));
  }
  job->version.fetch_add(1, std::memory_order_relaxed);

  absl::MutexLock lock(&job->reports_mu);
  if (iteration < job->iterations_done) {  // already summarised
    if (repeated != nullptr) *repeated = true;
    return out;
  }
  PendingIteration& pending = job->pending[iteration];
  if (pending.ranks.empty()) {
    pending.ranks.resize(world);
    pending.first_report = now;
  }
  if (pending.ranks[g].has_value()) {  // duplicate
    if (repeated != nullptr) *repeated = true;
    return out;
  }
  pending.ranks[g] = stats;
  if (loss) pending.losses.push_back(*loss);
  if (eval_loss) pending.eval_losses.push_back(*eval_loss);
  if (++pending.reported < world) {
    // Iterations whose other ranks are away longer than any rank may be (or past the memory
    // bound) are given up; the oldest first.
    while (!job->pending.empty() &&
           (job->pending.size() > options_.max_pending ||
            now - job->pending.begin()->second.first_report > options_.keep_pending)) {
      job->pending.erase(job->pending.begin());
    }
    return out;
  }
  // Every rank reports its iterations in order, so the earlier iterations still waiting never
  // complete: their missing reports went to a coordinator that is gone.
  for (auto it = job->pending.begin(); it != job->pending.end() && it->first <= iteration; ++it) {
    out.push_back(Summarise(it->first, it->second, job->predicted_bubble));
  }
  job->pending.erase(job->pending.begin(), job->pending.upper_bound(iteration));
  job->iterations_done = iteration + 1;
  return out;
}

IterationSummary ProgressTracker::Summarise(int iteration, const PendingIteration& pending,
                                            double predicted_bubble) {
  IterationSummary s;
  s.iteration = iteration;
  s.predicted_bubble_rate = predicted_bubble;
  double busy = 0;
  for (const std::optional<RankStats>& r : pending.ranks) {
    if (!r) continue;
    s.duration_s = std::max(s.duration_s, r->duration_s);
    busy += r->busy_s;
    s.reduce_total_s += r->reduce_s;
    s.reduce_exposed_s += r->exposed_reduce_s;
    s.ranks.push_back(*r);
  }
  const int reported = static_cast<int>(s.ranks.size());
  if (s.duration_s > 0 && reported > 0) {
    s.bubble_rate = std::max(0.0, 1.0 - busy / (reported * s.duration_s));
  }
  if (!pending.losses.empty()) {
    double sum = 0;
    for (double l : pending.losses) sum += l;
    s.loss = sum / pending.losses.size();
  }
  if (!pending.eval_losses.empty()) {
    double sum = 0;
    for (double l : pending.eval_losses) sum += l;
    s.eval_loss = sum / pending.eval_losses.size();
  }
  return s;
}

std::optional<JobProgressView> ProgressTracker::Get(const std::string& job_id,
                                                    bool with_microbatches) const {
  std::shared_ptr<Job> job = Find(job_id);
  if (!job) return std::nullopt;
  JobProgressView view;
  view.iterations_total = job->iterations;
  {
    absl::MutexLock lock(&job->reports_mu);
    view.iterations_done = job->iterations_done;
  }
  const int per_iteration = job->placement.chunks_per_rank() * job->m;
  int lowest = job->iterations;
  for (const auto& rank : job->ranks) {
    RankProgressView r;
    r.pipeline_rank = rank->slot.pipeline_rank;
    r.data_rank = rank->slot.data_rank;
    r.worker_name = rank->slot.worker_name;
    r.iteration = rank->iteration.load(std::memory_order_relaxed);
    r.forward_done = rank->f.load(std::memory_order_relaxed);
    r.backward_done = rank->b.load(std::memory_order_relaxed);
    r.weight_done = rank->w.load(std::memory_order_relaxed);
    r.iterations_done = rank->iterations_done.load(std::memory_order_relaxed);
    if (with_microbatches) {
      r.microbatches.reserve(rank->num_phases);
      for (size_t k = 0; k < rank->num_phases; ++k) {
        r.microbatches.push_back(
            static_cast<Phase>(rank->phases[k].load(std::memory_order_relaxed)));
      }
    }
    r.per_iteration = per_iteration;
    lowest = std::min(lowest, std::max(r.iteration, r.iterations_done));
    view.ranks.push_back(std::move(r));
  }
  view.iteration = std::min(lowest, std::max(job->iterations - 1, 0));
  return view;
}

uint64_t ProgressTracker::Version(const std::string& job_id) const {
  std::shared_ptr<Job> job = Find(job_id);
  return job ? job->version.load(std::memory_order_relaxed) : 0;
}

}  // namespace zpipe::coordinator
