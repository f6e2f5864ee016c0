#include "client/run_summary.h"

#include <algorithm>
#include <map>
#include <utility>

#include "client/client.h"

namespace zpipe::cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The job's own fields: what ran, how it ended, what was predicted, and how long it took.
void AddJobFields(const v1::Job& job, RunSummary& s) {
  s.job_id = job.id();
  s.state = JobStateName(job.state());
  s.reason = job.reason();
  s.schedule = job.spec().schedule().kind();
  s.synthetic = job.spec().model().has_synthetic();
  s.pipeline = job.spec().parallel().pipeline();
  s.data = std::max(1, job.spec().parallel().data());
  s.microbatches = job.spec().batch().microbatches();
  s.bubble_predicted = job.predicted().bubble_rate();
  s.reduce_overlap_predicted = job.predicted().reduce_overlap();
  s.layout = job.layout();
  if (job.has_create_time() && job.has_end_time()) {
    s.wall_s = static_cast<double>(job.end_time().seconds() - job.create_time().seconds()) +
               (job.end_time().nanos() - job.create_time().nanos()) * 1e-9;
  }
}

// The training and evaluation losses of every iteration.
void AddLosses(const std::vector<v1::IterationSummary>& iterations, RunSummary& s) {
  for (const v1::IterationSummary& it : iterations) {
    if (it.has_eval_loss()) s.eval_losses.emplace_back(it.iteration(), it.eval_loss());
    if (!it.has_loss()) continue;
    s.losses.push_back(it.loss());
    if (!s.loss_first.has_value()) s.loss_first = it.loss();
    s.loss_last = it.loss();
  }
}

// What the steady iterations reported: per iteration, and per (data rank, pipeline rank).
struct SteadyTotals {
  std::vector<double> bubble, predicted, at_measured_costs, duration;
  double tokens = 0, seconds = 0, reduce = 0, exposed = 0;
  std::map<std::pair<int, int>, std::vector<double>> rank_bubble, rank_busy;
  std::map<std::pair<int, int>, std::pair<double, double>> rank_reduce, rank_step;

  void Add(const v1::IterationSummary& it) {
    bubble.push_back(it.bubble_rate());
    predicted.push_back(it.predicted_bubble_rate());
    if (it.has_predicted_bubble_measured_costs()) {
      at_measured_costs.push_back(it.predicted_bubble_measured_costs());
    }
    duration.push_back(it.duration_s());
    seconds += it.duration_s();
    reduce += it.reduce_total_s();
    exposed += it.reduce_exposed_s();
    for (const v1::RankIterationStats& r : it.ranks()) {
      const auto key = std::make_pair(r.data_rank(), r.pipeline_rank());
      tokens += r.tokens();
      rank_bubble[key].push_back(it.duration_s() > 0 ? 1 - r.busy_s() / it.duration_s() : 0);
      rank_busy[key].push_back(r.busy_s());
      rank_reduce[key].first += r.reduce_s();
      rank_reduce[key].second += r.exposed_reduce_s();
      rank_step[key].first += r.step_s();
      rank_step[key].second += r.overlapped_step_s();
    }
  }
};

// The whole job's figures: medians over the steady iterations, reduce totals per iteration.
void AddSteadyFigures(const SteadyTotals& t, RunSummary& s) {
  s.bubble_measured = Median(t.bubble);
  if (!t.predicted.empty()) s.bubble_predicted = Median(t.predicted);
  if (!t.at_measured_costs.empty()) s.bubble_predicted_measured_costs = Median(t.at_measured_costs);
  s.iteration_s = Median(t.duration);
  s.tokens_per_s = t.seconds > 0 ? t.tokens / t.seconds : 0;
  if (s.steady_iterations > 0) {
    s.reduce_total_s = t.reduce / s.steady_iterations;
    s.reduce_exposed_s = t.exposed / s.steady_iterations;
  }
  if (t.reduce > 0) s.reduce_overlap = std::clamp(1 - t.exposed / t.reduce, 0.0, 1.0);
}

// One row per rank, by global rank: data_rank * p + pipeline_rank (the maps' order).
void AddRanks(const v1::Job& job, SteadyTotals& t, RunSummary& s) {
  for (const auto& [key, values] : t.rank_bubble) {
    RankSummary r;
    r.data_rank = key.first;
    r.pipeline_rank = key.second;
    r.bubble_measured = Median(values);
    if (r.pipeline_rank < job.predicted().rank_bubble_size()) {
      r.bubble_predicted = job.predicted().rank_bubble(r.pipeline_rank);
    }
    r.busy_s = Median(t.rank_busy[key]);
    r.reduce_s = t.rank_reduce[key].first;
    r.exposed_reduce_s = t.rank_reduce[key].second;
    if (s.steady_iterations > 0) {
      r.step_s = t.rank_step[key].first / s.steady_iterations;
      r.overlapped_step_s = t.rank_step[key].second / s.steady_iterations;
    }
    s.ranks.push_back(r);
  }
}

}  // namespace

RunSummary Summarize(const v1::Job& job, const std::vector<v1::IterationSummary>& iterations) {
  RunSummary s;
  AddJobFields(job, s);
  s.iterations = static_cast<int>(iterations.size());
  AddLosses(iterations, s);
  // The first iteration warms up (when there are more); the rest are steady.
  const size_t first = iterations.size() > 1 ? 1 : 0;
  s.steady_iterations = static_cast<int>(iterations.size() - first);
  SteadyTotals totals;
  for (size_t i = first; i < iterations.size(); ++i) totals.Add(iterations[i]);
  AddSteadyFigures(totals, s);
  AddRanks(job, totals, s);
  return s;
}

}  // namespace zpipe::cli
