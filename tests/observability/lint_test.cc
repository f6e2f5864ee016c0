// Lint of dashboards/zeropipe.json and dashboards/rules.yml: titles, descriptions and units on
// every panel, the $datasource variable on every panel and target, $__rate_interval in every
// rate()/increase(), and no metric in any query, variable or recording rule that a real
// zpipe-coordinator running a real job does not export. The Mutations tests break one thing at a
// time and expect the lint to say so.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/observability/observability_support.h"

namespace zpipe::testing {
namespace {

using nlohmann::json;

json Dashboard() { return json::parse(ReadFile(DashboardsDir() + "/zeropipe.json")); }
std::vector<RecordingRule> Rules() { return ReadRules(DashboardsDir() + "/rules.yml"); }

// What the issue asks the coordinator to export per job and rank, and for the cluster.
const std::set<std::string> kRequired = {"zpipe_busy_seconds_total",
                                         "zpipe_idle_seconds_total",
                                         "zpipe_bubble_ratio",
                                         "zpipe_bubble_ratio_predicted",
                                         "zpipe_job_bubble_ratio",
                                         "zpipe_job_bubble_ratio_predicted",
                                         "zpipe_reduce_seconds_total",
                                         "zpipe_exposed_reduce_seconds_total",
                                         "zpipe_reduce_overlap_ratio",
                                         "zpipe_job_reduce_overlap_ratio",
                                         "zpipe_p2p_wait_seconds_total",
                                         "zpipe_step_seconds_total",
                                         "zpipe_iteration_duration_seconds_bucket",
                                         "zpipe_iteration_duration_seconds_sum",
                                         "zpipe_iteration_duration_seconds_count",
                                         "zpipe_iterations_total",
                                         "zpipe_rank_iterations_total",
                                         "zpipe_tokens_total",
                                         "zpipe_jobs",
                                         "zpipe_workers",
                                         "zpipe_rpcs_total"};

TEST(DashboardLint, EveryQueryUsesOnlyWhatARunningCoordinatorExports) {
  ObservedCluster cluster(2);
  ASSERT_TRUE(cluster.WaitIdle(2));
  const absl::Status submitted = cluster.SubmitSynthetic("obs-lint", 2, 4, 2000, "zb-v");
  ASSERT_TRUE(submitted.ok()) << submitted;
  // Predicted bubbles come with the first iteration every rank has reported.
  ASSERT_TRUE(cluster.WaitForSeries("zpipe_bubble_ratio_predicted{"));
  ASSERT_TRUE(cluster.WaitForSeries("zpipe_job_bubble_ratio_predicted{"));
  auto body = HttpGet(cluster.coordinator_metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::set<std::string> exported = SampleNames(*body);
  for (const std::string& name : kRequired) {
    EXPECT_TRUE(exported.contains(name)) << name << " is not exported:\n" << *body;
  }
  // Labels: job_id and the rank labels; never job, microbatch or iteration.
  EXPECT_TRUE(absl::StrContains(*body, "job_id=\"obs-lint\"")) << *body;
  EXPECT_TRUE(absl::StrContains(*body, "pipeline_rank=\"1\"")) << *body;
  EXPECT_TRUE(absl::StrContains(*body, "op=\"W\"")) << *body;
  for (const char* bad : {"{job=", ",job=", "microbatch=", "iteration="}) {
    EXPECT_FALSE(absl::StrContains(*body, bad)) << bad << " in\n" << *body;
  }
  // A synthetic model computes no loss, so none is exported (no made-up curve).
  EXPECT_FALSE(absl::StrContains(*body, "zpipe_loss{")) << *body;
  // Label values in one case: states are lower case, as zpipe prints them.
  EXPECT_TRUE(absl::StrContains(*body, "zpipe_jobs{state=\"running\"}")) << *body;
  EXPECT_TRUE(absl::StrContains(*body, "zpipe_workers{state=\"busy\"}")) << *body;
  cluster.CancelAndWait("obs-lint");

  // Exported only for jobs with spec.eval, and for models with a loss (this synthetic job has
  // neither); the exporter itself is covered by coordinator/prometheus_metrics_test.
  std::set<std::string> usable = exported;
  usable.insert("zpipe_eval_loss");
  usable.insert("zpipe_loss");
  const std::vector<std::string> problems = LintDashboard(Dashboard(), Rules(), usable);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST(DashboardLint, CoversThePanelsTheIssueAsksFor) {
  const json d = Dashboard();
  EXPECT_EQ(d.value("uid", ""), "zeropipe-pipeline");
  EXPECT_GE(d.value("schemaVersion", 0), 39);
  std::string all;
  for (const auto& p : AllPanels(d)) absl::StrAppend(&all, p.value("title", ""), "\n");
  for (const char* want : {"measured vs predicted", "Bubble ratio per rank", "Reduce overlap",
                           "Exposed reduce", "Iteration time", "Tokens per second", "Loss",
                           "P2P wait", "Jobs by state", "Workers by state", "Optimizer step",
                           "CPU per process", "Resident memory per process",
                           "Open file descriptors per process", "Threads per process"}) {
    EXPECT_TRUE(absl::StrContains(all, want)) << "no panel titled like '" << want << "':\n" << all;
  }
}

// ---- the lint itself fails when a feature breaks ----

// Everything the clean dashboard and rules select, as if exported, so the clean lint passes and
// each mutation below is the only problem.
std::set<std::string> ExportedAsUsed() {
  std::set<std::string> used, records;
  for (const auto& r : Rules()) {
    records.insert(r.record);
    for (const auto& m : MetricNames(r.expr)) used.insert(m);
  }
  for (const auto& q : PanelQueries(Dashboard())) {
    for (const auto& m : MetricNames(q.expr)) used.insert(m);
  }
  used.insert("zpipe_iterations_total");
  used.insert("zpipe_bubble_ratio");
  for (const auto& r : records) used.erase(r);
  return used;
}

std::string Lint(const json& d, const std::vector<RecordingRule>& rules = Rules()) {
  return absl::StrJoin(LintDashboard(d, rules, ExportedAsUsed()), "\n");
}

TEST(DashboardLintMutations, CleanDashboardPasses) { EXPECT_EQ(Lint(Dashboard()), ""); }

TEST(DashboardLintMutations, PanelWithoutDescriptionUnitOrTitle) {
  json d = Dashboard();
  d["panels"][0].erase("description");
  d["panels"][1]["fieldConfig"]["defaults"].erase("unit");
  d["panels"][2]["title"] = "";
  const std::string problems = Lint(d);
  EXPECT_TRUE(absl::StrContains(problems, "no description")) << problems;
  EXPECT_TRUE(absl::StrContains(problems, "no unit")) << problems;
  EXPECT_TRUE(absl::StrContains(problems, "no title")) << problems;
}

TEST(DashboardLintMutations, HardCodedDatasource) {
  json d = Dashboard();
  d["panels"][3]["targets"][0]["datasource"] = {{"type", "prometheus"}, {"uid", "prom-1"}};
  EXPECT_TRUE(absl::StrContains(Lint(d), "datasource is not the $datasource variable"));
  json e = Dashboard();
  e["panels"][4].erase("datasource");
  EXPECT_TRUE(absl::StrContains(Lint(e), "datasource is not the $datasource variable"));
  json f = Dashboard();
  auto& vars = f["templating"]["list"];
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i]["name"] == "datasource") vars.erase(i);
  }
  EXPECT_TRUE(absl::StrContains(Lint(f), "no datasource variable"));
}

TEST(DashboardLintMutations, QueryOrRuleThatMixesCoordinators) {
  json d = Dashboard();
  d["panels"][0]["targets"][0]["expr"] = "zpipe_job_bubble_ratio{job_id=\"$job_id\"}";
  EXPECT_TRUE(absl::StrContains(Lint(d), "not filtered by $namespace and $coordinator")) << Lint(d);
  json e = Dashboard();
  for (auto& v : e["templating"]["list"]) {
    if (v["name"] == "job_id") v["query"]["query"] = "label_values(zpipe_iterations_total, job_id)";
  }
  EXPECT_TRUE(absl::StrContains(Lint(e), "variable job_id: zpipe_iterations_total is not filtered"))
      << Lint(e);
  std::vector<RecordingRule> rules = Rules();
  rules[0].expr = "sum by (job_id) (rate(zpipe_tokens_total[1m]))";
  EXPECT_TRUE(absl::StrContains(Lint(Dashboard(), rules), "drops namespace or job"))
      << Lint(Dashboard(), rules);
}

TEST(DashboardLintMutations, RateWithoutRateInterval) {
  json d = Dashboard();
  bool changed = false;
  for (auto& p : d["panels"]) {
    for (auto& t : p["targets"]) {
      std::string e = t["expr"];
      if (!changed && absl::StrContains(e, "[$__rate_interval]")) {
        t["expr"] = absl::StrReplaceAll(e, {{"[$__rate_interval]", "[5m]"}});
        changed = true;
      }
    }
  }
  ASSERT_TRUE(changed);
  const std::string problems = Lint(d);
  EXPECT_TRUE(absl::StrContains(problems, "is not [$__rate_interval]")) << problems;
  EXPECT_TRUE(absl::StrContains(problems, "without [$__rate_interval]")) << problems;
}

TEST(DashboardLintMutations, UnknownMetricInPanelVariableOrRule) {
  json d = Dashboard();
  d["panels"][0]["targets"][0]["expr"] = "zpipe_bubble_ratio_measured{job_id=\"$job_id\"}";
  EXPECT_TRUE(absl::StrContains(Lint(d), "metric zpipe_bubble_ratio_measured is neither"));

  json v = Dashboard();
  for (auto& var : v["templating"]["list"]) {
    if (var["name"] == "job_id") var["query"]["query"] = "label_values(zpipe_job_info, job_id)";
  }
  EXPECT_TRUE(absl::StrContains(Lint(v), "variable job_id: metric zpipe_job_info"));

  std::vector<RecordingRule> rules = Rules();
  rules.push_back({"zpipe:made_up:rate1m", "sum by (job_id) (rate(zpipe_made_up_total[1m]))"});
  EXPECT_TRUE(absl::StrContains(Lint(Dashboard(), rules), "metric zpipe_made_up_total"));

  // A recording rule the dashboard uses but rules.yml lost.
  std::vector<RecordingRule> fewer;
  for (const auto& r : Rules()) {
    if (r.record != "zpipe:tokens_per_second:rate1m") fewer.push_back(r);
  }
  EXPECT_TRUE(absl::StrContains(Lint(Dashboard(), fewer), "zpipe:tokens_per_second:rate1m"));
}

TEST(DashboardLintMutations, MetricNamesParser) {
  EXPECT_EQ(MetricNames("histogram_quantile(0.95, sum by (job_id, le) "
                        "(rate(zpipe_x_bucket{job_id=\"a b\"}[1m])))"),
            (std::set<std::string>{"zpipe_x_bucket"}));
  EXPECT_EQ(MetricNames("rate(a_total{op=\"F\"}[5s]) / ignoring (op) group_left rate(b[5s]) "
                        "- 1e3 * zpipe:c:rate1m"),
            (std::set<std::string>{"a_total", "b", "zpipe:c:rate1m"}));
}

}  // namespace
}  // namespace zpipe::testing
