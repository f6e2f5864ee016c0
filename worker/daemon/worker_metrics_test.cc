#include "worker/daemon/worker_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace zpipe::worker {
namespace {

std::string Scrape(prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

TEST(WorkerMetricsTest, AJobsSeriesGoAwayAfterTheRetentionOnceItEnded) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = NewPrometheusWorkerMetrics(registry, "w0", absl::ZeroDuration());
  IterationSummary s;
  s.duration_s = 0.5;
  s.forward_s = 0.1;
  metrics->OnIteration("old", 0, 0, s);
  metrics->OnIteration("old", 0, 0, s);
  EXPECT_NE(Scrape(*registry).find(R"(zpipe_worker_iterations_total{data_rank="0",job_id="old")"),
            std::string::npos);
  metrics->OnJobEnd("old", true);
  metrics->OnIteration("new", 1, 0, s);
  const std::string text = Scrape(*registry);
  EXPECT_EQ(text.find(R"(job_id="old")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(job_id="new")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(zpipe_worker_jobs_total{result="finished"} 1)"), std::string::npos)
      << "the per-result count stays";
}

TEST(WorkerMetricsTest, AJobsSeriesStayWithinTheRetention) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = NewPrometheusWorkerMetrics(registry, "w0", absl::Hours(1));
  IterationSummary s;
  metrics->OnIteration("done", 0, 0, s);
  metrics->OnJobEnd("done", false);
  metrics->OnIteration("next", 0, 0, s);
  EXPECT_NE(Scrape(*registry).find(R"(job_id="done")"), std::string::npos);
}

}  // namespace
}  // namespace zpipe::worker
