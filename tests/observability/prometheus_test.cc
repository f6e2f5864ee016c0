// The dashboard against the real thing: Debian's prometheus, on loopback with a temporary TSDB,
// scrapes (with dashboards/prometheus.yml, retargeted at this test's ports, and
// dashboards/rules.yml) a real zpipe-coordinator running a real synthetic job on real
// zpipe-worker processes. Every panel query of dashboards/zeropipe.json, variables substituted as
// Grafana would, must come back from /api/v1/query with status success and a non-empty result;
// the job_id and rank variables must list the running job and its ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/observability/observability_support.h"
#include "yaml-cpp/yaml.h"

namespace zpipe::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zpipe-prom-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Prometheus {
 public:
  Prometheus(const std::string& config, const std::string& dir) : port_(FreePort()) {
    process_ = std::make_unique<Subprocess>(std::vector<std::string>{
        ZPIPE_PROMETHEUS_BIN, absl::StrCat("--config.file=", config),
        absl::StrCat("--storage.tsdb.path=", dir, "/tsdb"),
        absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"});
  }
  ~Prometheus() {
    process_->Signal(SIGTERM);
    process_->Wait(20);
  }

  bool WaitReady(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline) {
      if (HttpGet(port_, "/-/ready", 2).ok()) return true;
      if (!process_->Running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // /api/v1/query for `promql` at the current time.
  absl::StatusOr<json> Query(const std::string& promql) {
    auto body = HttpGet(port_, absl::StrCat("/api/v1/query?query=", UrlEncode(promql)));
    if (!body.ok()) return body.status();
    json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InternalError(absl::StrCat("bad JSON: ", *body));
    return j;
  }
  // /api/v1/alerts: the alerts pending or firing now.
  absl::StatusOr<json> Alerts() {
    auto body = HttpGet(port_, "/api/v1/alerts");
    if (!body.ok()) return body.status();
    return json::parse(*body, nullptr, /*allow_exceptions=*/false);
  }

  // /api/v1/rules?type=alert: the alerting rules Prometheus loaded, by group.
  absl::StatusOr<json> AlertRules() {
    auto body = HttpGet(port_, "/api/v1/rules?type=alert");
    if (!body.ok()) return body.status();
    json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InternalError(absl::StrCat("bad JSON: ", *body));
    return j;
  }
  // The query's result rows once it has at least one (waiting up to `timeout_s`); the last
  // response's status and rows otherwise.
  json QueryUntilNonEmpty(const std::string& promql, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    json last;
    while (true) {
      auto r = Query(promql);
      if (r.ok()) {
        last = *r;
        if (last.value("status", "") == "success" && !last["data"]["result"].empty()) return last;
      } else {
        last = json{{"status", "transport"}, {"error", std::string(r.status().message())}};
      }
      if (Clock::now() > deadline) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  absl::StatusOr<json> LabelValues(const std::string& label, const std::string& match) {
    auto body =
        HttpGet(port_, absl::StrCat("/api/v1/label/", label, "/values?match[]=", UrlEncode(match)));
    if (!body.ok()) return body.status();
    return json::parse(*body, nullptr, false);
  }
  std::string Log() const { return process_->ReadErr() + process_->ReadOut(); }

 private:
  int port_;
  std::unique_ptr<Subprocess> process_;
};

double Scalar(const json& response) {
  const auto& result = response["data"]["result"];
  if (result.empty()) return -1;
  return std::stod(result[0]["value"][1].get<std::string>());
}

TEST(PrometheusDashboard, EveryPanelQueryReturnsDataFromARealJob) {
  ASSERT_STRNE(ZPIPE_PROMETHEUS_BIN, "")
      << "prometheus is not installed: run scripts/setup (Debian package prometheus)";
  constexpr int kPipeline = 2;
  const std::string job = "obs-prom";
  ObservedCluster cluster(kPipeline);
  ASSERT_TRUE(cluster.WaitIdle(kPipeline)) << "workers did not register";
  // Long enough to outlive the test (about 0.15 s per iteration); cancelled at the end.
  const absl::Status submitted =
      cluster.SubmitSynthetic(job, kPipeline, /*microbatches=*/8, /*iterations=*/4000, "zb-v");
  ASSERT_TRUE(submitted.ok()) << submitted;

  // dashboards/prometheus.yml, retargeted at this cluster, scraping and evaluating every 1 s.
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  YAML::Node config = YAML::LoadFile(DashboardsDir() + "/prometheus.yml");
  config["global"]["scrape_interval"] = "1s";
  config["global"]["evaluation_interval"] = "1s";
  YAML::Node rule_files(YAML::NodeType::Sequence);
  for (const auto& f : config["rule_files"]) {
    rule_files.push_back(absl::StrCat(DashboardsDir(), "/", f.as<std::string>()));
  }
  ASSERT_GT(rule_files.size(), 0u) << "prometheus.yml loads no rule files";
  config["rule_files"] = rule_files;
  bool coordinator_job = false, worker_job = false;
  for (auto sc : config["scrape_configs"]) {
    const std::string name = sc["job_name"].as<std::string>();
    YAML::Node targets(YAML::NodeType::Sequence);
    if (name == "zpipe-coordinator") {
      coordinator_job = true;
      targets.push_back(absl::StrCat("127.0.0.1:", cluster.coordinator_metrics_port()));
    } else if (name == "zpipe-worker") {
      worker_job = true;
      for (int port : cluster.worker_metrics_ports()) {
        targets.push_back(absl::StrCat("127.0.0.1:", port));
      }
    } else {
      continue;
    }
    YAML::Node static_config;
    static_config["targets"] = targets;
    YAML::Node static_configs(YAML::NodeType::Sequence);
    static_configs.push_back(static_config);
    sc["static_configs"] = static_configs;
  }
  ASSERT_TRUE(coordinator_job && worker_job)
      << "prometheus.yml needs scrape jobs zpipe-coordinator and zpipe-worker";
  const std::string config_path = dir.path() + "/prometheus.yml";
  {
    std::ofstream out(config_path);
    out << YAML::Dump(config) << "\n";
  }

  Prometheus prom(config_path, dir.path());
  ASSERT_TRUE(prom.WaitReady(30)) << prom.Log();

  // Data: every target up, the job's predicted bubble (after a complete iteration) and a
  // recording rule over a rate (after two scrapes and a rule evaluation).
  json up = prom.QueryUntilNonEmpty("count(up == 1) == 3", 30);
  ASSERT_FALSE(up["data"]["result"].empty())
      << "targets not all up: " << prom.Query("up").value_or(json()).dump() << "\n"
      << prom.Log();
  const std::string job_sel = absl::StrCat("{job_id=\"", job, "\"}");
  for (const std::string& q :
       {"zpipe_job_bubble_ratio_predicted" + job_sel, "zpipe:tokens_per_second:rate1m" + job_sel,
        "zpipe:job_bubble_overhead:ratio" + job_sel}) {
    json r = prom.QueryUntilNonEmpty(q, 40);
    ASSERT_FALSE(r["data"]["result"].empty()) << q << ": " << r.dump() << "\n" << prom.Log();
  }
  // A few more scrapes, so every rate window holds several samples.
  std::this_thread::sleep_for(std::chrono::seconds(3));

  // The variables: job_id lists the job, rank lists both pipeline ranks.
  const json dashboard = json::parse(ReadFile(DashboardsDir() + "/zeropipe.json"));
  for (const auto& v : dashboard["templating"]["list"]) {
    if (v["type"] != "query") continue;
    const std::string q = v["query"].is_object() ? v["query"]["query"].get<std::string>()
                                                 : v["query"].get<std::string>();
    // label_values(MATCH, LABEL)
    const size_t open = q.find('('), comma = q.rfind(','), close = q.rfind(')');
    ASSERT_TRUE(open != std::string::npos && comma != std::string::npos) << q;
    std::string match = q.substr(open + 1, comma - open - 1);
    std::string label = q.substr(comma + 1, close - comma - 1);
    label.erase(0, label.find_first_not_of(' '));
    Selection sel{job, ".*", "10s"};
    auto values = prom.LabelValues(label, Substitute(match, sel));
    ASSERT_TRUE(values.ok()) << values.status();
    std::set<std::string> got;
    for (const auto& x : (*values)["data"]) got.insert(x.get<std::string>());
    if (label == "job_id") {
      EXPECT_TRUE(got.contains(job)) << q << " -> " << values->dump();
    } else if (v["name"] == "workers") {  // the workers' scrape job
      EXPECT_EQ(got, (std::set<std::string>{"zpipe-worker"})) << q << " -> " << values->dump();
    } else if (label == "job") {  // $coordinator: the coordinator's scrape job, no worker's
      EXPECT_EQ(got, (std::set<std::string>{"zpipe-coordinator"})) << q << " -> " << values->dump();
    } else if (label == "pipeline_rank") {
      EXPECT_EQ(got, (std::set<std::string>{"0", "1"})) << q << " -> " << values->dump();
    }
  }

  // Live, not only at the end: the job is still running and its iteration counter moves.
  const double iterations_before =
      Scalar(prom.Query("zpipe_iterations_total" + job_sel).value_or(json()));

  // Every panel query.
  const Selection selection{job, "0|1", "10s"};
  const std::vector<PanelQuery> queries = PanelQueries(dashboard);
  ASSERT_GE(queries.size(), 10u);
  for (const PanelQuery& q : queries) {
    const std::string promql = Substitute(q.expr, selection);
    // Only jobs with an eval section export zpipe_eval_loss, and only models with a loss
    // zpipe_loss; this synthetic job has neither. The query must still be valid PromQL, and a
    // synthetic job shows no made-up loss.
    if (absl::StrContains(q.expr, "zpipe_eval_loss") || absl::StrContains(q.expr, "zpipe_loss")) {
      json r = prom.Query(promql).value_or(json());
      EXPECT_EQ(r.value("status", ""), "success") << promql << "\n" << r.dump();
      EXPECT_TRUE(r["data"]["result"].empty()) << promql << "\n" << r.dump();
      continue;
    }
    json r = prom.QueryUntilNonEmpty(promql, 15);
    EXPECT_EQ(r.value("status", ""), "success")
        << "panel '" << q.panel << "' " << q.ref_id << ": " << promql << "\n"
        << r.dump();
    EXPECT_FALSE(r["data"]["result"].empty())
        << "panel '" << q.panel << "' " << q.ref_id << ": " << promql << " returned nothing";
  }

  // What the dashboard would show, for the log.
  const double measured = Scalar(prom.Query("zpipe_job_bubble_ratio" + job_sel).value_or(json()));
  const double predicted =
      Scalar(prom.Query("zpipe_job_bubble_ratio_predicted" + job_sel).value_or(json()));
  const double average =
      Scalar(prom.Query("zpipe:job_bubble_ratio:rate1m" + job_sel).value_or(json()));
  std::printf("job %s: bubble measured %.4f, predicted at measured costs %.4f (1m average %.4f)\n",
              job.c_str(), measured, predicted, average);
  for (const char* per_rank : {"zpipe_bubble_ratio", "zpipe_bubble_ratio_predicted"}) {
    auto r = prom.Query(std::string(per_rank) + job_sel);
    if (!r.ok()) continue;
    for (const auto& row : (*r)["data"]["result"]) {
      std::printf("  %s{pipeline_rank=%s} %s\n", per_rank,
                  row["metric"]["pipeline_rank"].get<std::string>().c_str(),
                  row["value"][1].get<std::string>().c_str());
    }
  }
  const auto live_deadline = Clock::now() + std::chrono::seconds(10);
  double iterations_after = iterations_before;
  while (iterations_after <= iterations_before && Clock::now() < live_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    iterations_after = Scalar(prom.Query("zpipe_iterations_total" + job_sel).value_or(json()));
  }
  EXPECT_GT(iterations_before, 0);
  EXPECT_GT(iterations_after, iterations_before) << "zpipe_iterations_total did not move";
  EXPECT_EQ(Scalar(prom.Query("zpipe_jobs{state=\"running\"}").value_or(json())), 1);
  EXPECT_GE(predicted, 0);
  EXPECT_LT(predicted, 1);
  EXPECT_GE(measured, 0);
  EXPECT_LT(measured, 1);

  // The alerts of rules.yml are loaded, evaluate without error against the real series, and
  // none fires on this healthy job (some may be pending: e.g. ZPipeIterationStalled holds while
  // the first iteration is not complete yet, far shorter than its window).
  auto alert_rules = prom.AlertRules();
  ASSERT_TRUE(alert_rules.ok()) << alert_rules.status();
  std::set<std::string> alerts;
  for (const auto& group : (*alert_rules)["data"]["groups"]) {
    for (const auto& rule : group["rules"]) {
      const std::string name = rule.value("name", "");
      alerts.insert(name);
      EXPECT_EQ(rule.value("health", ""), "ok") << name << ": " << rule.dump();
      EXPECT_NE(rule.value("state", ""), "firing") << name << ": " << rule.dump();
    }
  }
  EXPECT_EQ(alerts, (std::set<std::string>{"ZPipeJobFailed", "ZPipeWorkerLost",
                                           "ZPipeIterationStalled", "ZPipeBubbleAboveNormal",
                                           "ZPipeExposedReduceHigh", "ZPipeJobRestarting"}))
      << alert_rules->dump();

  // The process row shows the coordinator and both workers.
  json processes = prom.QueryUntilNonEmpty(
      Substitute("count(process_resident_memory_bytes{namespace=~\"$namespace\", "
                 "job=~\"$coordinator|$workers\"} > 0)",
                 selection),
      10);
  EXPECT_EQ(Scalar(processes), 3) << processes.dump();

  // A worker leaves mid-job: the job fails, and ZPipeJobFailed fires for it, naming it.
  cluster.StopWorker(1);
  const auto alert_deadline = Clock::now() + std::chrono::seconds(30);
  json fired;
  while (fired.is_null() && Clock::now() < alert_deadline) {
    auto alerts = prom.Alerts();
    if (alerts.ok()) {
      for (const auto& a : (*alerts)["data"]["alerts"]) {
        if (a["labels"].value("alertname", "") == "ZPipeJobFailed" &&
            a.value("state", "") == "firing") {
          fired = a;
        }
      }
    }
    if (fired.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_FALSE(fired.is_null()) << "ZPipeJobFailed did not fire after job " << job << " failed\n"
                                << prom.Log();
  std::printf("fired: %s\n", fired.dump().c_str());
  EXPECT_EQ(fired["labels"].value("job_id", ""), job) << fired.dump();
  EXPECT_EQ(fired["labels"].value("state", ""), "failed") << fired.dump();
  EXPECT_EQ(fired["annotations"].value("summary", ""), absl::StrCat("ZeroPipe job ", job, " failed"))
      << fired.dump();
}

}  // namespace
}  // namespace zpipe::testing
