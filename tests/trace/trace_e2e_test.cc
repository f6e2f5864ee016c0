// Executed timelines end to end: a real zpipe-coordinator and real zpipe-worker processes run a
// synthetic pipeline; GetTrace then holds every compute action of the plan for the traced
// iteration on the right rank, in plan order, with increasing times on the coordinator's clock
// and small clock offsets (one host: the true offset is 0); `zpipe trace` writes a Chrome trace
// that parses and an SVG.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "nlohmann/json.hpp"
#include "tests/cli/subprocess.h"
#include "tests/support/local_cluster.h"

namespace zpipe {
namespace {

using testing::Subprocess;

class Cluster : public testing::LocalCluster {
 public:
  explicit Cluster(int workers)
      : LocalCluster(workers, {.coordinator_bin = ZPIPE_COORDINATOR_BIN,
                               .worker_bin = ZPIPE_WORKER_BIN,
                               .comm_timeout_s = "10"}) {}
};

v1::JobSpec SyntheticSpec(const std::string& schedule, int p, int m, int iterations) {
  v1::JobSpec spec;
  spec.set_name("trace-e2e");
  auto* syn = spec.mutable_model()->mutable_synthetic();
  syn->set_forward_ms(4);
  syn->set_backward_ms(4);
  syn->set_weight_ms(3);
  syn->set_activation_kb(8);
  syn->set_params_mb(0.5);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind(schedule);
  spec.mutable_batch()->set_microbatches(m);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_lr(1e-3);
  return spec;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TraceE2eTest, ExecutedTimelineHoldsThePlanOnOneClock) {
  constexpr int kP = 3, kIterations = 6;
  Cluster cluster(kP);
  ASSERT_TRUE(cluster.WaitIdle(kP));
  const std::string id = "trace-zbv";
  ASSERT_TRUE(cluster.client().Submit(SyntheticSpec("zb-v", kP, 6, kIterations), id).ok());
  auto job = cluster.WaitTerminal(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();

  auto plan = cluster.client().Plan(id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto trace = cluster.client().Trace(id);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->response.iteration(), kIterations - 1);  // the latest complete one
  EXPECT_TRUE(trace->response.complete());
  ASSERT_EQ(trace->executed.ranks.size(), static_cast<size_t>(kP));
  ASSERT_EQ(trace->predicted.ranks.size(), static_cast<size_t>(kP));

  double first_start = 1e300, last_end = -1e300;
  for (int r = 0; r < kP; ++r) {
    const core::RankTimeline& row = trace->executed.ranks[r];
    EXPECT_EQ(row.pipeline_rank, r);
    EXPECT_EQ(row.worker, absl::StrCat("w", r));
    std::vector<core::Action> expected;
    for (const core::Action& a : plan->plan.ranks[r]) {
      if (core::IsCompute(a.kind)) expected.push_back(a);
    }
    std::vector<core::Action> executed;
    double previous_start = -1e300;
    for (const core::TimedAction& a : row.actions) {
      if (!core::IsCompute(a.action.kind)) continue;
      executed.push_back(a.action);
      EXPECT_LE(a.start, a.end) << core::ActionToString(a.action);
      EXPECT_GE(a.start, previous_start) << "rank " << r << " " << core::ActionToString(a.action);
      previous_start = a.start;
      first_start = std::min(first_start, a.start);
      last_end = std::max(last_end, a.end);
    }
    EXPECT_EQ(executed, expected) << "rank " << r;
    // Every predicted action of the plan, in plan order.
    ASSERT_EQ(trace->predicted.ranks[r].actions.size(), plan->plan.ranks[r].size());
    for (size_t k = 0; k < plan->plan.ranks[r].size(); ++k) {
      EXPECT_EQ(trace->predicted.ranks[r].actions[k].action, plan->plan.ranks[r][k]);
    }
    // One host: the true offset is 0; the estimate is the fastest message's delay.
    const v1::RankTrace& rt = trace->response.ranks(r);
    EXPECT_GT(rt.clock_samples(), 0);
    EXPECT_GE(rt.clock_offset(), -0.005) << "rank " << r;
    EXPECT_LT(rt.clock_offset(), 0.05) << "rank " << r;
    std::printf("rank %d: %zu compute actions, clock offset %.3f ms over %d samples\n", r,
                executed.size(), 1e3 * rt.clock_offset(), rt.clock_samples());
  }
  EXPECT_NEAR(first_start, 0, 1e-6);  // relative to the response's start_time
  // One iteration on one clock: dependencies across ranks hold, so F(s0) of the first
  // microbatch starts before the last stage's first action.
  EXPECT_GT(last_end, 0);
  EXPECT_LT(last_end, 5.0);

  // An explicit iteration; one that was never run is NOT_FOUND.
  auto earlier = cluster.client().Trace(id, kIterations - 2);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  EXPECT_EQ(earlier->response.iteration(), kIterations - 2);
  EXPECT_EQ(cluster.client().Trace(id, 1000).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cluster.client().Trace("no-such-job").status().code(), absl::StatusCode::kNotFound);

  // The CLI: a Chrome trace that parses and holds every executed compute action, and an SVG.
  const std::string dir = ::testing::TempDir();
  const std::string json_path = absl::StrCat(dir, "/trace-", getpid(), ".json");
  const std::string svg_path = absl::StrCat(dir, "/trace-", getpid(), ".svg");
  testing::ProcessResult cli =
      testing::RunProcess({ZPIPE_CLI_BIN, "--coordinator", cluster.address(), "trace", id,
                           "--format", "chrome", "-o", json_path});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const nlohmann::json chrome = nlohmann::json::parse(ReadFile(json_path));
  std::map<int, int> compute_per_pid;
  for (const auto& e : chrome["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"].get<int>() < 100000 &&
        (e["cat"] == "F" || e["cat"] == "B" || e["cat"] == "W" || e["cat"] == "BW")) {
      ++compute_per_pid[e["pid"].get<int>()];
    }
  }
  for (int r = 0; r < kP; ++r) {
    int expected = 0;
    for (const core::Action& a : plan->plan.ranks[r]) expected += core::IsCompute(a.kind);
    EXPECT_EQ(compute_per_pid[r], expected) << "rank " << r;
  }
  cli = testing::RunProcess(
      {ZPIPE_CLI_BIN, "--coordinator", cluster.address(), "trace", id, "-o", svg_path});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const std::string svg = ReadFile(svg_path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("F s0 mb0"), std::string::npos);
  std::remove(json_path.c_str());
  std::remove(svg_path.c_str());
}

}  // namespace
}  // namespace zpipe
