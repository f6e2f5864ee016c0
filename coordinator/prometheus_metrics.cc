#include "coordinator/prometheus_metrics.h"

#include <algorithm>
#include <exception>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "zpipe/build_info.h"

namespace zpipe::coordinator {
namespace {

constexpr size_t kRemovedMemory = 1024;

template <typename T>
prometheus::Family<T>& Build(prometheus::Registry& registry, const char* name, const char* help) {
  if constexpr (std::is_same_v<T, prometheus::Counter>) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  } else if constexpr (std::is_same_v<T, prometheus::Gauge>) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
  } else {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
  }
}

// Every metric's name and help (the members of PrometheusMetrics they make).
struct MetricDef {
  const char* name;
  const char* help;
};

constexpr MetricDef kJobs{"zpipe_jobs", "Jobs known to the coordinator, by state"};
constexpr MetricDef kWorkers{"zpipe_workers", "Registered workers, by state"};
constexpr MetricDef kRpcs{"zpipe_rpcs_total", "gRPC calls handled, by method and status code"};
constexpr MetricDef kRestarts{
    "zpipe_job_restarts_total",
    "Automatic restarts of a job that lost a rank (spec restart.max_restarts)"};
constexpr MetricDef kJobState{
    "zpipe_job_state",
    "1 for a job that has ended, labelled with how: succeeded, failed or cancelled (kept as long "
    "as the job's other series)"};
constexpr MetricDef kStoreErrors{"zpipe_store_write_errors_total",
                                 "Job store writes that failed (a full disk); each is retried"};
constexpr MetricDef kStoreUnsaved{
    "zpipe_store_unsaved_jobs",
    "Jobs whose latest change the job store has not taken yet (0 = every change is stored)"};
constexpr MetricDef kBusy{
    "zpipe_busy_seconds_total",
    "Seconds a pipeline rank spent in compute actions, by op (F, B, W; a fused BW counts as B)"};
constexpr MetricDef kIdle{"zpipe_idle_seconds_total",
                          "Seconds of a rank's iteration span not spent in compute (its bubble)"};
constexpr MetricDef kRankBubble{
    "zpipe_bubble_ratio",
    "Measured bubble ratio of a rank in its latest iteration: 1 - busy / span"};
constexpr MetricDef kRankBubblePredicted{
    "zpipe_bubble_ratio_predicted",
    "A rank's bubble ratio predicted by re-simulating the plan at the costs the workers measured "
    "in the latest complete iteration"};
constexpr MetricDef kReduce{"zpipe_reduce_seconds_total",
                            "Gradient all-reduce wall time of a rank"};
constexpr MetricDef kExposedReduce{
    "zpipe_exposed_reduce_seconds_total",
    "Gradient all-reduce wall time that overlapped no compute on the same rank"};
constexpr MetricDef kRankOverlap{
    "zpipe_reduce_overlap_ratio",
    "A rank's reduce overlap in its latest iteration: 1 - exposed / total (1 without reductions)"};
constexpr MetricDef kP2pWait{"zpipe_p2p_wait_seconds_total",
                             "Seconds a rank spent blocked in P2P receives"};
constexpr MetricDef kStep{
    "zpipe_step_seconds_total",
    "Seconds of a rank's optimizer step, by phase: after_reduce (after the iteration's last "
    "reduction) or overlapped (bucket by bucket during the iteration)"};
constexpr MetricDef kRankIterations{"zpipe_rank_iterations_total",
                                    "Iterations a rank has reported"};
constexpr MetricDef kTokens{
    "zpipe_tokens_total",
    "Training tokens a rank processed (counted where stage 0 runs; 0 for synthetic models)"};
constexpr MetricDef kJobBubble{
    "zpipe_job_bubble_ratio",
    "Measured bubble rate of a job's latest complete iteration: 1 - sum(busy) / (p * d * span)"};
constexpr MetricDef kJobBubblePredicted{
    "zpipe_job_bubble_ratio_predicted",
    "A job's bubble rate predicted by re-simulating its plan at the costs the workers measured in "
    "the latest complete iteration"};
constexpr MetricDef kJobOverlap{
    "zpipe_job_reduce_overlap_ratio",
    "Reduce overlap of a job's latest complete iteration: 1 - sum(exposed) / sum(reduce)"};
constexpr MetricDef kDuration{
    "zpipe_iteration_duration_seconds",
    "Iteration span of a job (max over ranks of first action start to last end)"};
constexpr MetricDef kIterations{"zpipe_iterations_total",
                                "Iterations every rank of a job has reported"};
constexpr MetricDef kLoss{
    "zpipe_loss",
    "Training loss of a job's latest complete iteration, mean over data-parallel replicas"};
constexpr MetricDef kEvalLoss{
    "zpipe_eval_loss", "Mean loss over a job's eval batches (spec.eval), at its latest evaluation"};
constexpr MetricDef kPlanVersion{
    "zpipe_job_plan_version",
    "The plan version a job runs: 0 = its first plan, +1 per re-plan applied "
    "(schedule.replan_every)"};
constexpr MetricDef kPlanSwitches{
    "zpipe_job_plan_switches_total",
    "Re-plans from measured costs, by phase: scheduled (a better plan was found and sent), "
    "applied (every rank switched), abandoned (a rank had already started the iteration)"};

template <typename T>
prometheus::Family<T>& Build(prometheus::Registry& registry, const MetricDef& def) {
  return Build<T>(registry, def.name, def.help);
}

prometheus::Labels RankLabels(const std::string& job_id, int pipeline_rank, int data_rank) {
  return {{"job_id", job_id},
          {"pipeline_rank", absl::StrCat(pipeline_rank)},
          {"data_rank", absl::StrCat(data_rank)}};
}

// Counters only go up: a negative measurement (clock trouble) adds nothing.
void Add(prometheus::Counter* c, double v) {
  if (v > 0) c->Increment(v);
}

double OverlapRatio(double total, double exposed) {
  return total > 0 ? std::clamp(1.0 - exposed / total, 0.0, 1.0) : 1.0;
}

}  // namespace

PrometheusMetrics::PrometheusMetrics(prometheus::Registry& registry,
                                     PrometheusMetricsOptions options)
    : options_(options),
      jobs_(Build<prometheus::Gauge>(registry, kJobs)),
      workers_(Build<prometheus::Gauge>(registry, kWorkers)),
      rpcs_(Build<prometheus::Counter>(registry, kRpcs)),
      restarts_(Build<prometheus::Counter>(registry, kRestarts)),
      store_errors_(Build<prometheus::Counter>(registry, kStoreErrors).Add({})),
      store_unsaved_(Build<prometheus::Gauge>(registry, kStoreUnsaved).Add({})),
      busy_(Build<prometheus::Counter>(registry, kBusy)),
      idle_(Build<prometheus::Counter>(registry, kIdle)),
      rank_bubble_(Build<prometheus::Gauge>(registry, kRankBubble)),
      rank_bubble_predicted_(Build<prometheus::Gauge>(registry, kRankBubblePredicted)),
      reduce_(Build<prometheus::Counter>(registry, kReduce)),
      exposed_reduce_(Build<prometheus::Counter>(registry, kExposedReduce)),
      rank_overlap_(Build<prometheus::Gauge>(registry, kRankOverlap)),
      p2p_wait_(Build<prometheus::Counter>(registry, kP2pWait)),
      step_(Build<prometheus::Counter>(registry, kStep)),
      rank_iterations_(Build<prometheus::Counter>(registry, kRankIterations)),
      tokens_(Build<prometheus::Counter>(registry, kTokens)),
      job_bubble_(Build<prometheus::Gauge>(registry, kJobBubble)),
      job_bubble_predicted_(Build<prometheus::Gauge>(registry, kJobBubblePredicted)),
      job_overlap_(Build<prometheus::Gauge>(registry, kJobOverlap)),
      duration_(Build<prometheus::Histogram>(registry, kDuration)),
      iterations_(Build<prometheus::Counter>(registry, kIterations)),
      loss_(Build<prometheus::Gauge>(registry, kLoss)),
      eval_loss_(Build<prometheus::Gauge>(registry, kEvalLoss)),
      plan_version_(Build<prometheus::Gauge>(registry, kPlanVersion)),
      plan_switches_(Build<prometheus::Counter>(registry, kPlanSwitches)),
      job_state_(Build<prometheus::Gauge>(registry, kJobState)) {
  // Every state is exported from the start, so dashboards see zeros rather than gaps.
  for (JobState s : kAllJobStates) SetJobCount(s, 0);
  // The info-metric idiom: one series at 1 whose labels say what is running.
  Build<prometheus::Gauge>(registry, "zpipe_build_info",
                           "The coordinator's build: project version, git commit, and the LibTorch "
                           "and CUDA versions it was configured with (empty when unknown)")
      .Add({{"version", build_info::kVersion},
            {"commit", build_info::kCommit},
            {"torch", build_info::kTorch},
            {"cuda", build_info::kCuda}})
      .Set(1);
  for (WorkerState s : kAllWorkerStates) SetWorkerCount(s, 0);
}

void PrometheusMetrics::SetJobCount(JobState state, int64_t count) {
  // Lower case like zpipe_workers{state="idle"} and the CLI ("running"); JobStateName is the
  // store's upper-case spelling.
  jobs_.Add({{"state", absl::AsciiStrToLower(JobStateName(state))}})
      .Set(static_cast<double>(count));
}

void PrometheusMetrics::SetWorkerCount(WorkerState state, int64_t count) {
  workers_.Add({{"state", std::string(WorkerStateName(state))}}).Set(static_cast<double>(count));
}

void PrometheusMetrics::CountRpc(absl::string_view method, absl::StatusCode code) {
  const std::string code_name = absl::StatusCodeToString(code);
  const std::string key = absl::StrCat(method, "|", code_name);
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&mu_);
    auto it = rpc_counters_.find(key);
    if (it == rpc_counters_.end()) {
      counter = &rpcs_.Add({{"method", std::string(method)}, {"code", code_name}});
      rpc_counters_.emplace(key, counter);
    } else {
      counter = it->second;
    }
  }
  counter->Increment();
}

PrometheusMetrics::JobSeries* PrometheusMetrics::JobLocked(const std::string& job_id) {
  if (removed_.contains(job_id)) return nullptr;
  JobSeries& j = job_series_[job_id];
  if (j.bubble == nullptr) {
    // A job that ended before it reported anything has only its state: a late report must not
    // start its series.
    if (j.finished) return nullptr;
    const prometheus::Labels labels{{"job_id", job_id}};
    j.bubble = &job_bubble_.Add(labels);
    j.overlap = &job_overlap_.Add(labels);
    j.iterations = &iterations_.Add(labels);
    j.duration = &duration_.Add(
        labels, prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                        2.5, 5, 10, 30, 60, 120, 300});
  }
  return &j;
}

PrometheusMetrics::RankSeries& PrometheusMetrics::RankLocked(const std::string& job_id,
                                                             JobSeries& job, int pipeline_rank,
                                                             int data_rank) {
  auto [it, created] = job.ranks.try_emplace({data_rank, pipeline_rank});
  RankSeries& r = it->second;
  if (created) {
    const prometheus::Labels labels = RankLabels(job_id, pipeline_rank, data_rank);
    auto with_op = [&](const char* op) {
      prometheus::Labels l = labels;
      l.emplace("op", op);
      return &busy_.Add(l);
    };
    r.busy_f = with_op("F");
    r.busy_b = with_op("B");
    r.busy_w = with_op("W");
    r.idle = &idle_.Add(labels);
    r.bubble = &rank_bubble_.Add(labels);
    r.reduce = &reduce_.Add(labels);
    r.exposed_reduce = &exposed_reduce_.Add(labels);
    r.overlap = &rank_overlap_.Add(labels);
    r.p2p_wait = &p2p_wait_.Add(labels);
    auto with_phase = [&](const char* phase) {
      auto l = labels;
      l.emplace("phase", phase);
      return &step_.Add(l);
    };
    r.step_after = with_phase("after_reduce");
    r.step_overlapped = with_phase("overlapped");
    r.iterations = &rank_iterations_.Add(labels);
    r.tokens = &tokens_.Add(labels);
  }
  return r;
}

void PrometheusMetrics::ObserveRankIteration(const std::string& job_id, int iteration,
                                             const RankStats& s) {
  absl::MutexLock lock(&mu_);
  JobSeries* job = JobLocked(job_id);
  if (job == nullptr) return;
  RankSeries& r = RankLocked(job_id, *job, s.pipeline_rank, s.data_rank);
  if (iteration <= r.last_iteration) return;  // a duplicate or a replay
  r.last_iteration = iteration;
  Add(r.busy_f, s.forward_s);
  Add(r.busy_b, s.backward_s);
  Add(r.busy_w, s.weight_s);
  Add(r.idle, s.idle_s);
  r.bubble->Set(s.bubble_ratio);
  Add(r.reduce, s.reduce_s);
  Add(r.exposed_reduce, s.exposed_reduce_s);
  r.overlap->Set(OverlapRatio(s.reduce_s, s.exposed_reduce_s));
  Add(r.p2p_wait, s.p2p_wait_s);
  Add(r.step_after, s.step_s);
  Add(r.step_overlapped, s.overlapped_step_s);
  r.iterations->Increment();
  Add(r.tokens, s.tokens);
}

void PrometheusMetrics::ObserveJobIteration(const std::string& job_id,
                                            const IterationSummary& summary,
                                            const std::optional<PredictedBubble>& predicted) {
  absl::MutexLock lock(&mu_);
  JobSeries* job = JobLocked(job_id);
  if (job == nullptr || summary.iteration <= job->last_iteration) return;
  job->last_iteration = summary.iteration;
  job->bubble->Set(summary.bubble_rate);
  job->overlap->Set(OverlapRatio(summary.reduce_total_s, summary.reduce_exposed_s));
  job->duration->Observe(summary.duration_s);
  job->iterations->Increment();
  if (summary.loss) {
    if (job->loss == nullptr) job->loss = &loss_.Add({{"job_id", job_id}});
    job->loss->Set(*summary.loss);
  }
  if (summary.eval_loss) {
    if (job->eval_loss == nullptr) job->eval_loss = &eval_loss_.Add({{"job_id", job_id}});
    job->eval_loss->Set(*summary.eval_loss);
  }
  if (predicted) {
    if (job->bubble_predicted == nullptr) {
      job->bubble_predicted = &job_bubble_predicted_.Add({{"job_id", job_id}});
    }
    job->bubble_predicted->Set(predicted->job);
    for (size_t g = 0; g < summary.ranks.size() && g < predicted->ranks.size(); ++g) {
      const RankStats& s = summary.ranks[g];
      RankSeries& r = RankLocked(job_id, *job, s.pipeline_rank, s.data_rank);
      if (r.bubble_predicted == nullptr) {
        r.bubble_predicted =
            &rank_bubble_predicted_.Add(RankLabels(job_id, s.pipeline_rank, s.data_rank));
      }
      r.bubble_predicted->Set(predicted->ranks[g]);
    }
  }
}

void PrometheusMetrics::JobRestarted(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobSeries* job = JobLocked(job_id);
  if (job == nullptr) return;
  if (job->restarts == nullptr) job->restarts = &restarts_.Add({{"job_id", job_id}});
  job->restarts->Increment();
}

void PrometheusMetrics::JobFinished(const std::string& job_id, JobState state, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (removed_.contains(job_id)) return;
  JobSeries& job = job_series_[job_id];  // only the state, for a job that never reported
  if (job.finished) return;
  job.finished = now;
  job.state = &job_state_.Add(
      {{"job_id", job_id}, {"state", absl::AsciiStrToLower(JobStateName(state))}});
  job.state->Set(1);
  finished_order_.push_back(job_id);
  while (static_cast<int>(finished_order_.size()) > std::max(0, options_.max_finished_jobs)) {
    const std::string oldest = finished_order_.front();
    finished_order_.pop_front();
    RemoveLocked(oldest);
  }
}

void PrometheusMetrics::ExpireJobs(absl::Time now) {
  absl::MutexLock lock(&mu_);
  while (!finished_order_.empty()) {
    auto it = job_series_.find(finished_order_.front());
    if (it != job_series_.end() && it->second.finished &&
        now - *it->second.finished < options_.finished_job_retention) {
      break;
    }
    const std::string id = finished_order_.front();
    finished_order_.pop_front();
    RemoveLocked(id);
  }
}

void PrometheusMetrics::ObservePlanSwitch(const std::string& job_id, absl::string_view phase,
                                          int plan_version) {
  absl::MutexLock lock(&mu_);
  JobSeries* job = JobLocked(job_id);
  if (job == nullptr) return;
  if (job->plan_version == nullptr) job->plan_version = &plan_version_.Add({{"job_id", job_id}});
  job->plan_version->Set(plan_version);
  prometheus::Counter*& c = job->plan_switches[std::string(phase)];
  if (c == nullptr) c = &plan_switches_.Add({{"job_id", job_id}, {"phase", std::string(phase)}});
  c->Increment();
}

void PrometheusMetrics::RemoveLocked(const std::string& job_id) {
  auto it = job_series_.find(job_id);
  if (it != job_series_.end()) {
    JobSeries& j = it->second;
    for (auto& [key, r] : j.ranks) {
      for (prometheus::Counter* c : {r.busy_f, r.busy_b, r.busy_w}) busy_.Remove(c);
      idle_.Remove(r.idle);
      rank_bubble_.Remove(r.bubble);
      if (r.bubble_predicted != nullptr) rank_bubble_predicted_.Remove(r.bubble_predicted);
      reduce_.Remove(r.reduce);
      exposed_reduce_.Remove(r.exposed_reduce);
      rank_overlap_.Remove(r.overlap);
      p2p_wait_.Remove(r.p2p_wait);
      step_.Remove(r.step_after);
      step_.Remove(r.step_overlapped);
      rank_iterations_.Remove(r.iterations);
      tokens_.Remove(r.tokens);
    }
    if (j.bubble != nullptr) {
      job_bubble_.Remove(j.bubble);
      job_overlap_.Remove(j.overlap);
      duration_.Remove(j.duration);
      iterations_.Remove(j.iterations);
    }
    if (j.bubble_predicted != nullptr) job_bubble_predicted_.Remove(j.bubble_predicted);
    if (j.loss != nullptr) loss_.Remove(j.loss);
    if (j.eval_loss != nullptr) eval_loss_.Remove(j.eval_loss);
    if (j.plan_version != nullptr) plan_version_.Remove(j.plan_version);
    for (auto& [phase, c] : j.plan_switches) plan_switches_.Remove(c);
    if (j.restarts != nullptr) restarts_.Remove(j.restarts);
    if (j.state != nullptr) job_state_.Remove(j.state);
    job_series_.erase(it);
  }
  if (removed_.insert(job_id).second) removed_order_.push_back(job_id);
  while (removed_order_.size() > kRemovedMemory) {
    removed_.erase(removed_order_.front());
    removed_order_.pop_front();
  }
}

int PrometheusMetrics::exported_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(job_series_.size());
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& host_port, std::shared_ptr<prometheus::Registry> registry) {
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(host_port, /*num_threads=*/1);
    exposer->RegisterCollectable(registry);
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host_port, ": ", e.what()));
  }
}

}  // namespace zpipe::coordinator
