// Shared pieces of the observability tests: a real cluster (zpipe-coordinator + zpipe-worker
// processes on loopback running a synthetic job), a tiny HTTP GET, and the dashboard / rules
// readers and lint (dashboards/zeropipe.json, dashboards/rules.yml).
#ifndef ZPIPE_TESTS_OBSERVABILITY_OBSERVABILITY_SUPPORT_H_
#define ZPIPE_TESTS_OBSERVABILITY_OBSERVABILITY_SUPPORT_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "nlohmann/json.hpp"
#include "tests/cli/subprocess.h"

namespace zpipe::testing {

// HTTP/1.0 GET of http://127.0.0.1:PORT/PATH_AND_QUERY; the body when the status is 200.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path_and_query,
                                    double timeout_s = 10);
std::string UrlEncode(const std::string& text);

// A coordinator (with /metrics) and `workers` workers, each worker with its own /metrics.
class ObservedCluster {
 public:
  explicit ObservedCluster(int workers);
  ~ObservedCluster();

  bool WaitIdle(int n, double timeout_s = 60);
  // Submits a synthetic job (p = workers, d = 1) and waits until it is RUNNING and every rank
  // has reported `iterations_reported` iterations... see the .cc.
  absl::Status SubmitSynthetic(const std::string& job_id, int p, int microbatches, int iterations,
                               const std::string& schedule = "zb-h1");
  // Polls the coordinator's /metrics until `series_prefix` (e.g. "zpipe_loss{") appears in it.
  bool WaitForSeries(const std::string& series_prefix, double timeout_s = 60);
  // Cancels the job (if still running) and waits for a terminal state.
  void CancelAndWait(const std::string& job_id);
  // Stops worker `i` with SIGTERM (it leaves: a job it holds fails at once) and waits for it.
  void StopWorker(int i);

  int coordinator_metrics_port() const { return coordinator_metrics_port_; }
  const std::vector<int>& worker_metrics_ports() const { return worker_metrics_ports_; }
  Client& client() { return *client_; }

 private:
  std::string address_;
  int coordinator_metrics_port_ = 0;
  std::vector<int> worker_metrics_ports_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::unique_ptr<Client> client_;
};

// The names of every sample in a Prometheus text exposition (histograms give _bucket, _sum and
// _count).
std::set<std::string> SampleNames(const std::string& exposition);

// ---- dashboards/ ----
std::string ReadFile(const std::string& path);
std::string DashboardsDir();  // $ZPIPE_DASHBOARDS_DIR, else <source>/dashboards

struct PanelQuery {
  std::string panel;  // panel title
  std::string ref_id;
  std::string expr;
};
// Every target expression of every panel (rows and nested row panels included).
std::vector<PanelQuery> PanelQueries(const nlohmann::json& dashboard);
// Every panel, nested row panels flattened.
std::vector<nlohmann::json> AllPanels(const nlohmann::json& dashboard);

// Grafana's variables the way Grafana would expand them for one selection.
struct Selection {
  std::string job_id;
  std::string rank = ".*";            // $rank (a regex: "All" or "0|1")
  std::string rate_interval = "10s";  // $__rate_interval
  // $namespace: none outside Kubernetes, so Grafana's empty value (matches an absent label).
  std::string namespace_ = "";
  std::string coordinator = "zpipe-coordinator";  // $coordinator: the scrape job's name
  std::string workers = "zpipe-worker";           // $workers: the workers' scrape job
};
std::string Substitute(const std::string& expr, const Selection& s);

// Metric (or recording rule) names a PromQL expression selects: identifiers outside strings,
// label matchers, ranges and by/without/on/ignoring/group_* lists, not called as functions and
// not operators or keywords.
std::set<std::string> MetricNames(const std::string& promql);

struct RecordingRule {
  std::string record;
  std::string expr;
};
std::vector<RecordingRule> ReadRules(const std::string& rules_yml_path);

// Problems found in a dashboard (empty = clean): every panel has a title, a description, a unit
// and the datasource variable (panel and each target); the dashboard has a uid, a recent
// schemaVersion and the variables datasource (type prometheus), job_id and rank; every
// rate()/increase()/irate() and every range selector uses $__rate_interval; every metric a query
// (or a variable) selects is in `exported` or is a recording rule in `rules` whose own metrics
// are in `exported`.
std::vector<std::string> LintDashboard(const nlohmann::json& dashboard,
                                       const std::vector<RecordingRule>& rules,
                                       const std::set<std::string>& exported);

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_OBSERVABILITY_OBSERVABILITY_SUPPORT_H_
