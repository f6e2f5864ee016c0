// Executed timelines end to end: a real zpipe-coordinator and real zpipe-worker processes run a
// synthetic pipeline; GetTrace then holds every compute action of the plan for the traced
// iteration on the right rank, in plan order, with increasing times on the coordinator's clock
// and small clock offsets (one host: the true offset is 0), and every send and receive of the
// plan, each receive completing after its send was posted (causality across ranks on the one
// clock), and with d = 2 every bucket's reduction on both replicas; `zpipe trace` writes a Chrome
// trace that parses (with its SEND / RECV tracks) and an SVG.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

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

v1::JobSpec SyntheticSpec(const std::string& schedule, int p, int m, int iterations, int d = 1) {
  v1::JobSpec spec;
  spec.set_name("trace-e2e");
  auto* syn = spec.mutable_model()->mutable_synthetic();
  syn->set_forward_ms(4);
  syn->set_backward_ms(4);
  syn->set_weight_ms(3);
  syn->set_activation_kb(8);
  syn->set_params_mb(0.5);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(d);
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

// A job run to success, its plan and the trace of its latest complete iteration.
struct TracedRun {
  JobPlan plan;
  JobTrace trace;
};

absl::StatusOr<TracedRun> RunAndTrace(Cluster& cluster, const v1::JobSpec& spec,
                                      const std::string& id) {
  if (absl::Status st = cluster.client().Submit(spec, id).status(); !st.ok()) return st;
  auto job = cluster.WaitTerminal(id);
  if (!job.ok()) return job.status();
  if (job->state() != v1::JOB_STATE_SUCCEEDED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " did not succeed: ", job->reason()));
  }
  auto plan = cluster.client().Plan(id);
  if (!plan.ok()) return plan.status();
  auto trace = cluster.client().Trace(id);
  if (!trace.ok()) return trace.status();
  return TracedRun{*std::move(plan), *std::move(trace)};
}

// The clock-alignment error bound for comparing a time of rank `g` with one of another rank.
// One host: the true offset is 0 and the estimate (>= 0) is the error itself; 1 ms more covers
// each worker's steady-to-wall conversion.
double AlignmentTolerance(const JobTrace& trace, int g) {
  return std::max(0.0, trace.response.ranks(g).clock_offset()) + 1e-3;
}

// Every send and receive of the plan is on its rank (each replica) exactly once, with start <=
// end, and every receive completes no earlier than its send (the peer's SEND of the same kind,
// stage and microbatch in the same replica) was posted. Returns the smallest such margin.
double ExpectCommOfPlan(const JobTrace& trace, const core::Plan& plan, int d) {
  const int p = plan.num_ranks();
  EXPECT_EQ(trace.executed.ranks.size(), static_cast<size_t>(p * d));
  if (trace.executed.ranks.size() != static_cast<size_t>(p * d)) return 0;
  using Key = std::tuple<core::ActionKind, int, int>;  // (SEND kind, stage, microbatch)
  double min_margin = 1e300;
  for (int dr = 0; dr < d; ++dr) {
    std::map<Key, core::TimedAction> sends;
    std::vector<core::TimedAction> recvs;
    for (int r = 0; r < p; ++r) {
      std::multiset<std::string> want, got;
      for (const core::Action& a : plan.ranks[r]) {
        if (core::IsComm(a.kind)) want.insert(core::ActionToString(a));
      }
      for (const core::TimedAction& a : trace.executed.ranks[dr * p + r].actions) {
        if (!core::IsComm(a.action.kind)) continue;
        got.insert(core::ActionToString(a.action));
        EXPECT_LE(a.start, a.end) << core::ActionToString(a.action);
        if (core::IsSend(a.action.kind)) {
          sends[{a.action.kind, a.action.stage, a.action.microbatch}] = a;
        } else {
          recvs.push_back(a);
        }
      }
      EXPECT_FALSE(want.empty());
      EXPECT_EQ(got, want) << "rank " << r << " dp " << dr << ": sends and receives";
    }
    for (const core::TimedAction& recv : recvs) {
      const core::ActionKind send_kind = recv.action.kind == core::ActionKind::kRecvAct
                                             ? core::ActionKind::kSendAct
                                             : core::ActionKind::kSendGrad;
      auto it = sends.find({send_kind, recv.action.stage, recv.action.microbatch});
      if (it == sends.end()) {
        ADD_FAILURE() << "no send for " << core::ActionToString(recv.action);
        continue;
      }
      const double margin = recv.end - it->second.start;
      min_margin = std::min(min_margin, margin);
      EXPECT_GE(margin, -AlignmentTolerance(trace, dr * p + recv.action.peer))
          << core::ActionToString(recv.action) << " (dp " << dr << ") completed before "
          << core::ActionToString(it->second.action) << " was posted";
    }
  }
  return min_margin;
}

TEST(TraceE2eTest, ExecutedTimelineHoldsThePlanOnOneClock) {
  constexpr int kP = 3, kIterations = 6;
  Cluster cluster(kP);
  ASSERT_TRUE(cluster.WaitIdle(kP));
  const std::string id = "trace-zbv";
  auto run = RunAndTrace(cluster, SyntheticSpec("zb-v", kP, 6, kIterations), id);
  ASSERT_TRUE(run.ok()) << run.status();
  const JobPlan* plan = &run->plan;
  const JobTrace* trace = &run->trace;
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
      first_start = std::min(first_start, a.start);  // any action: a receive may be posted first
      if (!core::IsCompute(a.action.kind)) continue;
      executed.push_back(a.action);
      EXPECT_LE(a.start, a.end) << core::ActionToString(a.action);
      EXPECT_GE(a.start, previous_start) << "rank " << r << " " << core::ActionToString(a.action);
      previous_start = a.start;
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
  const double margin = ExpectCommOfPlan(*trace, plan->plan, 1);
  std::printf("smallest receive-end minus send-start margin: %.3f ms\n", 1e3 * margin);
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
                           "--format", "chrome", "-f", json_path});
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
      {ZPIPE_CLI_BIN, "--coordinator", cluster.address(), "trace", id, "-f", svg_path});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const std::string svg = ReadFile(svg_path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("F s0 mb0"), std::string::npos);
  std::remove(json_path.c_str());
  std::remove(svg_path.c_str());
}

// p = 2, d = 2: the executed timeline has every send and receive of the plan on each of the four
// ranks (receive end >= send start across ranks, on the coordinator's clock) and every bucket's
// reduction on both replicas of each pipeline rank, the two overlapping in time (an all-reduce
// cannot finish on one replica before it started on the other); the Chrome trace `zpipe trace`
// writes has them on the SEND, RECV and REDUCE tracks.
TEST(TraceE2eTest, ExecutedTimelineHoldsSendsReceivesAndReductions) {
  constexpr int kP = 2, kD = 2, kIterations = 3;
  Cluster cluster(kP * kD);
  ASSERT_TRUE(cluster.WaitIdle(kP * kD));
  const std::string id = "trace-comm";
  auto run = RunAndTrace(cluster, SyntheticSpec("zb-h1", kP, 4, kIterations, kD), id);
  ASSERT_TRUE(run.ok()) << run.status();
  const JobPlan* plan = &run->plan;
  const JobTrace* trace = &run->trace;
  EXPECT_EQ(trace->response.iteration(), kIterations - 1);
  EXPECT_TRUE(trace->response.complete());
  const double margin = ExpectCommOfPlan(*trace, plan->plan, kD);

  // Reductions: the plan's buckets of each rank (the synthetic stage packs into as many as the
  // planner assumed), once each on both replicas, overlapping across them.
  double reduce_s = 0;
  for (int r = 0; r < kP; ++r) {
    std::set<std::pair<int, int>> buckets;
    for (const core::Action& a : plan->plan.ranks[r]) {
      if (a.kind == core::ActionKind::kReduce) buckets.insert({a.chunk, a.bucket});
    }
    ASSERT_FALSE(buckets.empty());
    std::map<std::pair<int, int>, core::TimedAction> replica[kD];
    for (int dr = 0; dr < kD; ++dr) {
      for (const core::TimedAction& a : trace->executed.ranks[dr * kP + r].actions) {
        if (a.action.kind != core::ActionKind::kReduce) continue;
        EXPECT_LE(a.start, a.end);
        EXPECT_TRUE(replica[dr].emplace(std::make_pair(a.action.chunk, a.action.bucket), a).second)
            << "rank " << r << " dp " << dr << ": " << core::ActionToString(a.action) << " twice";
        reduce_s += a.end - a.start;
      }
      std::set<std::pair<int, int>> got;
      for (const auto& [bucket, a] : replica[dr]) got.insert(bucket);
      EXPECT_EQ(got, buckets) << "rank " << r << " dp " << dr << ": reduced buckets";
    }
    for (const auto& [bucket, a0] : replica[0]) {
      auto it = replica[1].find(bucket);
      if (it == replica[1].end()) continue;
      const core::TimedAction& a1 = it->second;
      EXPECT_GE(a0.end, a1.start - AlignmentTolerance(*trace, kP + r));
      EXPECT_GE(a1.end, a0.start - AlignmentTolerance(*trace, r));
    }
  }
  std::string offsets;
  for (const v1::RankTrace& r : trace->response.ranks()) {
    absl::StrAppend(&offsets, offsets.empty() ? "" : ", ", 1e3 * r.clock_offset());
  }
  std::printf(
      "p=%d d=%d: smallest receive-end minus send-start margin %.3f ms, reduce %.3f ms, clock "
      "offsets (ms) %s\n",
      kP, kD, 1e3 * margin, 1e3 * reduce_s, offsets.c_str());

  // `zpipe trace`: SEND / RECV / REDUCE events on their tracks of each executed rank.
  const std::string json_path =
      absl::StrCat(::testing::TempDir(), "/trace-comm-", getpid(), ".json");
  testing::ProcessResult cli =
      testing::RunProcess({ZPIPE_CLI_BIN, "--coordinator", cluster.address(), "trace", id,
                           "--format", "chrome", "-f", json_path});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const nlohmann::json chrome = nlohmann::json::parse(ReadFile(json_path));
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const auto& e : chrome["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
    }
  }
  std::map<std::pair<int, std::string>, int> per_track;  // (pid, track name) -> events
  for (const auto& e : chrome["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"].get<int>() >= 100000) continue;
    const std::string track = thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}];
    const std::string cat = e["cat"];
    const std::string prefix = cat.substr(0, 4);  // SEND, RECV, REDU...
    if (prefix == "SEND" || prefix == "RECV" || cat == "REDUCE") {
      EXPECT_EQ(track.rfind(cat == "REDUCE" ? "REDUCE" : prefix, 0), 0u)
          << cat << " on track '" << track << "'";
      ++per_track[{e["pid"].get<int>(), cat == "REDUCE" ? "REDUCE" : prefix}];
    }
  }
  for (int g = 0; g < kP * kD; ++g) {
    int sends = 0, recvs = 0, reduces = 0;
    for (const core::Action& a : plan->plan.ranks[g % kP]) {
      sends += core::IsSend(a.kind);
      recvs += core::IsRecv(a.kind);
      reduces += a.kind == core::ActionKind::kReduce;
    }
    EXPECT_EQ((per_track[{g, "SEND"}]), sends) << "rank " << g;
    EXPECT_EQ((per_track[{g, "RECV"}]), recvs) << "rank " << g;
    EXPECT_EQ((per_track[{g, "REDUCE"}]), reduces) << "rank " << g;
  }
  std::remove(json_path.c_str());
}

}  // namespace
}  // namespace zpipe
