#include "worker/daemon/worker_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/process_metrics.h"

namespace zpipe::worker {
namespace {

class PrometheusWorkerMetrics : public WorkerMetrics {
 public:
  PrometheusWorkerMetrics(std::unique_ptr<prometheus::Exposer> exposer,
                          std::shared_ptr<prometheus::Registry> registry, const std::string& worker,
                          absl::Duration retention)
      : exposer_(std::move(exposer)),
        registry_(std::move(registry)),
        worker_(worker),
        retention_(retention),
        iterations_(prometheus::BuildCounter()
                        .Name("zpipe_worker_iterations_total")
                        .Help("Iterations this worker completed, by job and rank")
                        .Register(*registry_)),
        busy_(prometheus::BuildCounter()
                  .Name("zpipe_worker_busy_seconds_total")
                  .Help("Time in compute actions, by job, rank and op (F, B, W)")
                  .Register(*registry_)),
        idle_(prometheus::BuildCounter()
                  .Name("zpipe_worker_idle_seconds_total")
                  .Help("Iteration time not spent computing, by job and rank")
                  .Register(*registry_)),
        reduce_(prometheus::BuildCounter()
                    .Name("zpipe_worker_reduce_seconds_total")
                    .Help("Gradient all-reduce wall time, by job and rank")
                    .Register(*registry_)),
        exposed_(prometheus::BuildCounter()
                     .Name("zpipe_worker_exposed_reduce_seconds_total")
                     .Help("All-reduce time that did not overlap compute, by job and rank")
                     .Register(*registry_)),
        p2p_wait_(prometheus::BuildCounter()
                      .Name("zpipe_worker_p2p_wait_seconds_total")
                      .Help("Time blocked waiting for pipeline receives, by job and rank")
                      .Register(*registry_)),
        bubble_(prometheus::BuildGauge()
                    .Name("zpipe_worker_bubble_ratio")
                    .Help("Measured bubble ratio of the last iteration (1 - busy / duration)")
                    .Register(*registry_)),
        duration_(prometheus::BuildHistogram()
                      .Name("zpipe_worker_iteration_duration_seconds")
                      .Help("Iteration duration on this rank")
                      .Register(*registry_)),
        jobs_(prometheus::BuildCounter()
                  .Name("zpipe_worker_jobs_total")
                  .Help("Jobs this worker ran to an end, by result")
                  .Register(*registry_)),
        busy_state_(prometheus::BuildGauge()
                        .Name("zpipe_worker_busy")
                        .Help("1 while the worker runs a job rank, else 0")
                        .Register(*registry_)
                        .Add({{"worker", worker}})) {
    if (exposer_) {
      exposer_->RegisterCollectable(registry_);
      exposer_->RegisterCollectable(process_);
    }
  }

  void OnIteration(const std::string& job_id, int pipeline_rank, int data_rank,
                   const IterationSummary& s) override {
    absl::MutexLock lock(&mu_);
    ExpireLocked(absl::Now());
    const std::map<std::string, std::string> labels = {
        {"job_id", job_id},
        {"pipeline_rank", absl::StrCat(pipeline_rank)},
        {"data_rank", absl::StrCat(data_rank)}};
    JobSeries& series = jobs_series_[job_id];
    auto with_op = [&](const char* op) {
      auto l = labels;
      l["op"] = op;
      return l;
    };
    auto counter = [&](prometheus::Family<prometheus::Counter>& family,
                       const std::map<std::string, std::string>& l) -> prometheus::Counter& {
      prometheus::Counter& c = family.Add(l);
      series.removers.insert({&c, [&family, &c] { family.Remove(&c); }});
      return c;
    };
    counter(iterations_, labels).Increment();
    counter(busy_, with_op("F")).Increment(s.forward_s);
    counter(busy_, with_op("B")).Increment(s.backward_s);
    counter(busy_, with_op("W")).Increment(s.weight_s);
    counter(idle_, labels).Increment(s.idle_s);
    counter(reduce_, labels).Increment(s.reduce_s);
    counter(exposed_, labels).Increment(s.exposed_reduce_s);
    counter(p2p_wait_, labels).Increment(s.p2p_wait_s);
    prometheus::Gauge& bubble = bubble_.Add(labels);
    series.removers.insert({&bubble, [this, &bubble] { bubble_.Remove(&bubble); }});
    bubble.Set(s.bubble_ratio);
    prometheus::Histogram& duration = duration_.Add(
        labels, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                        0.5, 1, 2.5, 5, 10, 30, 60});
    series.removers.insert({&duration, [this, &duration] { duration_.Remove(&duration); }});
    duration.Observe(s.duration_s);
  }

  void OnJobEnd(const std::string& job_id, bool ok) override {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    jobs_.Add({{"result", ok ? "finished" : "failed"}}).Increment();
    if (auto it = jobs_series_.find(job_id); it != jobs_series_.end()) it->second.ended = now;
    ExpireLocked(now);
  }

  void SetBusy(bool busy) override {
    busy_state_.Set(busy ? 1 : 0);
    absl::MutexLock lock(&mu_);
    ExpireLocked(absl::Now());
  }

 private:
  // A job's series, each with the call that removes it from its family.
  struct JobSeries {
    std::map<const void*, std::function<void()>> removers;
    std::optional<absl::Time> ended;
  };

  // Removes the series of jobs that ended `retention_` ago or more.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = jobs_series_.begin(); it != jobs_series_.end();) {
      if (it->second.ended && now - *it->second.ended >= retention_) {
        for (auto& [metric, remove] : it->second.removers) remove();
        it = jobs_series_.erase(it);
      } else {
        ++it;
      }
    }
  }

  absl::Mutex mu_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  // process_* (the exposer holds only a weak_ptr).
  std::shared_ptr<util::ProcessCollector> process_ = std::make_shared<util::ProcessCollector>();
  std::string worker_;
  const absl::Duration retention_;
  std::map<std::string, JobSeries> jobs_series_ ABSL_GUARDED_BY(mu_);
  prometheus::Family<prometheus::Counter>& iterations_;
  prometheus::Family<prometheus::Counter>& busy_;
  prometheus::Family<prometheus::Counter>& idle_;
  prometheus::Family<prometheus::Counter>& reduce_;
  prometheus::Family<prometheus::Counter>& exposed_;
  prometheus::Family<prometheus::Counter>& p2p_wait_;
  prometheus::Family<prometheus::Gauge>& bubble_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& jobs_;
  prometheus::Gauge& busy_state_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerMetrics>> NewPrometheusWorkerMetrics(
    const std::string& listen, const std::string& worker, absl::Duration finished_job_retention) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", listen, ": ", e.what()));
  }
  return std::unique_ptr<WorkerMetrics>(
      new PrometheusWorkerMetrics(std::move(exposer), std::make_shared<prometheus::Registry>(),
                                  worker, finished_job_retention));
}

std::unique_ptr<WorkerMetrics> NewPrometheusWorkerMetrics(
    std::shared_ptr<prometheus::Registry> registry, const std::string& worker,
    absl::Duration finished_job_retention) {
  return std::unique_ptr<WorkerMetrics>(
      new PrometheusWorkerMetrics(nullptr, std::move(registry), worker, finished_job_retention));
}

}  // namespace zpipe::worker
