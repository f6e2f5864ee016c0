#include "tests/observability/observability_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/support/local_cluster.h"
#include "yaml-cpp/yaml.h"

namespace zpipe::testing {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

absl::StatusOr<std::string> HttpGet(int port, const std::string& path_and_query, double timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, " failed"));
  }
  const std::string request =
      absl::StrCat("GET ", path_and_query, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  const auto deadline = Deadline(timeout_s);
  char buf[65536];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ::close(fd);
      return absl::DeadlineExceededError(absl::StrCat("GET ", path_and_query, ": timed out"));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("no HTTP response");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  std::string payload = response.substr(body + 4);
  if (!absl::StrContains(status_line, " 200")) {
    return absl::UnavailableError(
        absl::StrCat("GET ", path_and_query, ": ", status_line, ": ", payload.substr(0, 2000)));
  }
  return payload;
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// ---- cluster ----

ObservedCluster::ObservedCluster(int workers) {
  const int port = FreePort();
  address_ = absl::StrCat("127.0.0.1:", port);
  coordinator_metrics_port_ = FreePort();
  coordinator_ = std::make_unique<Subprocess>(
      std::vector<std::string>{ZPIPE_COORDINATOR_BIN, "--listen", address_, "--metrics-listen",
                               absl::StrCat("127.0.0.1:", coordinator_metrics_port_), "--db",
                               ":memory:", "--heartbeat-timeout", "10s"});
  client_ = Client::Create(address_);
  for (int i = 0; i < workers; ++i) {
    const int metrics_port = FreePort();
    worker_metrics_ports_.push_back(metrics_port);
    workers_.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        ZPIPE_WORKER_BIN, "--coordinator", address_, "--name", absl::StrCat("obs-w", i), "--device",
        absl::StrCat("cpu:", i), "--comm-timeout", "10", "--metrics-listen",
        absl::StrCat("127.0.0.1:", metrics_port)}));
  }
}

ObservedCluster::~ObservedCluster() {
  for (auto& w : workers_) w->Signal(SIGTERM);
  for (auto& w : workers_) w->Wait(10);
  coordinator_->Signal(SIGTERM);
  coordinator_->Wait(10);
}

void ObservedCluster::StopWorker(int i) {
  workers_.at(i)->Signal(SIGTERM);
  workers_.at(i)->Wait(10);
}

bool ObservedCluster::WaitIdle(int n, double timeout_s) {
  return WaitForIdleWorkers(*client_, n, timeout_s);
}

absl::Status ObservedCluster::SubmitSynthetic(const std::string& job_id, int p, int microbatches,
                                              int iterations, const std::string& schedule) {
  v1::JobSpec spec;
  spec.set_name("observability");
  auto* m = spec.mutable_model()->mutable_synthetic();
  m->set_forward_ms(5);
  m->set_backward_ms(5);
  m->set_weight_ms(5);
  m->set_activation_kb(4);
  m->set_params_mb(1);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_schedule()->set_kind(schedule);
  spec.mutable_batch()->set_microbatches(microbatches);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(1e-3);
  spec.mutable_train()->set_seed(1);
  spec.set_device(v1::DEVICE_KIND_CPU);
  auto submitted = client_->Submit(spec, job_id);
  return submitted.status();
}

bool ObservedCluster::WaitForSeries(const std::string& series_prefix, double timeout_s) {
  const auto deadline = Deadline(timeout_s);
  while (Clock::now() < deadline) {
    auto body = HttpGet(coordinator_metrics_port_, "/metrics");
    if (body.ok()) {
      for (absl::string_view line : absl::StrSplit(*body, '\n')) {
        if (absl::StartsWith(line, series_prefix)) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

void ObservedCluster::CancelAndWait(const std::string& job_id) {
  (void)client_->Cancel(job_id, "observability test done");
  const auto deadline = Deadline(30);
  while (Clock::now() < deadline) {
    auto job = client_->Get(job_id);
    if (!job.ok() || IsTerminal(job->state())) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::set<std::string> SampleNames(const std::string& exposition) {
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (end == absl::string_view::npos || end == 0) continue;
    names.emplace(line.substr(0, end));
  }
  return names;
}

// ---- dashboards ----

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DashboardsDir() {
  // ZPIPE_DASHBOARDS_DIR: check another copy (e.g. a deliberately broken one).
  const char* dir = std::getenv("ZPIPE_DASHBOARDS_DIR");
  return dir != nullptr && *dir != '\0' ? dir : absl::StrCat(ZPIPE_SOURCE_DIR, "/dashboards");
}

std::vector<nlohmann::json> AllPanels(const nlohmann::json& dashboard) {
  std::vector<nlohmann::json> out;
  for (const auto& p : dashboard.value("panels", nlohmann::json::array())) {
    out.push_back(p);
    for (const auto& nested : p.value("panels", nlohmann::json::array())) out.push_back(nested);
  }
  return out;
}

std::vector<PanelQuery> PanelQueries(const nlohmann::json& dashboard) {
  std::vector<PanelQuery> out;
  for (const auto& p : AllPanels(dashboard)) {
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      out.push_back({p.value("title", ""), t.value("refId", ""), t.value("expr", "")});
    }
  }
  return out;
}

std::string Substitute(const std::string& expr, const Selection& s) {
  return absl::StrReplaceAll(expr, {{"${namespace}", s.namespace_},
                                    {"$namespace", s.namespace_},
                                    {"${coordinator}", s.coordinator},
                                    {"$coordinator", s.coordinator},
                                    {"${workers}", s.workers},
                                    {"$workers", s.workers},
                                    {"${job_id}", s.job_id},
                                    {"$job_id", s.job_id},
                                    {"${rank}", s.rank},
                                    {"$rank", s.rank},
                                    {"${__rate_interval}", s.rate_interval},
                                    {"$__rate_interval", s.rate_interval}});
}

std::set<std::string> MetricNames(const std::string& promql) {
  std::string q = promql;
  // Strings and label matchers, ranges, and label lists go first.
  q = std::regex_replace(q, std::regex(R"("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"), " ");
  q = std::regex_replace(q, std::regex(R"(\{[^}]*\})"), " ");
  q = std::regex_replace(q, std::regex(R"(\[[^\]]*\])"), " ");
  q = std::regex_replace(
      q, std::regex(R"(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))"), " ");
  static const std::set<std::string> kKeywords = {
      "by", "without", "on",     "ignoring", "group_left", "group_right", "bool", "and",
      "or", "unless",  "offset", "inf",      "nan",        "Inf",         "NaN",  "atan2"};
  std::set<std::string> names;
  const std::regex ident(R"([A-Za-z_:][A-Za-z0-9_:]*)");
  for (auto it = std::sregex_iterator(q.begin(), q.end(), ident); it != std::sregex_iterator();
       ++it) {
    const size_t pos = static_cast<size_t>(it->position());
    const std::string name = it->str();
    if (pos > 0 && (std::isdigit(static_cast<unsigned char>(q[pos - 1])) || q[pos - 1] == '.')) {
      continue;  // 1e3, 0.5
    }
    size_t next = pos + name.size();
    while (next < q.size() && std::isspace(static_cast<unsigned char>(q[next]))) ++next;
    if (next < q.size() && q[next] == '(') continue;  // a function
    if (kKeywords.contains(name)) continue;
    names.insert(name);
  }
  return names;
}

std::vector<RecordingRule> ReadRules(const std::string& path) {
  std::vector<RecordingRule> out;
  YAML::Node root = YAML::LoadFile(path);
  for (const auto& group : root["groups"]) {
    for (const auto& rule : group["rules"]) {
      if (rule["record"]) {
        out.push_back({rule["record"].as<std::string>(), rule["expr"].as<std::string>()});
      }
    }
  }
  return out;
}

namespace {

// The query of a Grafana variable: a string, or {"query": "..."}.
std::string VariableQuery(const nlohmann::json& v) {
  if (!v.contains("query")) return "";
  if (v["query"].is_string()) return v["query"].get<std::string>();
  if (v["query"].is_object()) return v["query"].value("query", "");
  return "";
}

bool UsesDatasourceVariable(const nlohmann::json& node) {
  if (!node.contains("datasource")) return false;
  const auto& ds = node["datasource"];
  if (ds.is_string()) return ds == "$datasource" || ds == "${datasource}";
  if (!ds.is_object()) return false;
  const std::string uid = ds.value("uid", "");
  return (uid == "$datasource" || uid == "${datasource}") && ds.value("type", "") == "prometheus";
}

}  // namespace

std::vector<std::string> LintDashboard(const nlohmann::json& dash,
                                       const std::vector<RecordingRule>& rules,
                                       const std::set<std::string>& exported) {
  std::vector<std::string> problems;
  if (dash.value("uid", "").empty()) problems.push_back("dashboard: no uid");
  if (!dash.contains("schemaVersion") || !dash["schemaVersion"].is_number() ||
      dash["schemaVersion"].get<int>() < 36) {
    problems.push_back("dashboard: schemaVersion missing or older than 36");
  }
  if (dash.value("title", "").empty()) problems.push_back("dashboard: no title");

  // Recording rules: name -> metrics it reads.
  std::map<std::string, std::set<std::string>> rule_inputs;
  for (const auto& r : rules) rule_inputs[r.record] = MetricNames(r.expr);
  auto check_metrics = [&](const std::string& where, const std::string& expr) {
    for (const std::string& m : MetricNames(expr)) {
      if (exported.contains(m)) continue;
      auto rule = rule_inputs.find(m);
      if (rule == rule_inputs.end()) {
        problems.push_back(absl::StrCat(where, ": metric ", m,
                                        " is neither exported by the coordinator nor a "
                                        "recording rule in rules.yml"));
        continue;
      }
      for (const std::string& in : rule->second) {
        if (!exported.contains(in)) {
          problems.push_back(absl::StrCat(where, ": recording rule ", m, " reads ", in,
                                          ", which the coordinator does not export"));
        }
      }
    }
  };
  for (const auto& r : rules) check_metrics(absl::StrCat("rules.yml ", r.record), r.expr);
  // Several coordinators may share one Prometheus: every selector of a zpipe series names the
  // coordinator ($namespace, $coordinator), and recording rules keep the labels that do.
  auto check_scoped = [&](const std::string& where, const std::string& expr) {
    static const std::regex kSelector(R"((zpipe[_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?)");
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kSelector);
         it != std::sregex_iterator(); ++it) {
      const std::string matchers = (*it)[2].str();
      if (!absl::StrContains(matchers, "namespace=~\"$namespace\"") ||
          !absl::StrContains(matchers, "job=~\"$coordinator\"")) {
        problems.push_back(absl::StrCat(where, ": ", (*it)[1].str(),
                                        " is not filtered by $namespace and $coordinator"));
      }
    }
  };
  for (const auto& r : rules) {
    static const std::regex kBy(R"(\bby\s*\(([^)]*)\))");
    for (auto it = std::sregex_iterator(r.expr.begin(), r.expr.end(), kBy);
         it != std::sregex_iterator(); ++it) {
      const std::string labels = (*it)[1].str();
      if (!std::regex_search(labels, std::regex(R"(\bnamespace\b)")) ||
          !std::regex_search(labels, std::regex(R"(\bjob\b)"))) {
        problems.push_back(
            absl::StrCat("rules.yml ", r.record, ": by (", labels, ") drops namespace or job"));
      }
    }
  }

  // Variables.
  std::map<std::string, nlohmann::json> vars;
  for (const auto& v : dash["templating"].value("list", nlohmann::json::array())) {
    vars[v.value("name", "")] = v;
  }
  if (!vars.contains("datasource") || vars["datasource"].value("type", "") != "datasource" ||
      vars["datasource"].value("query", "") != "prometheus") {
    problems.push_back("variables: no datasource variable of type prometheus");
  }
  for (const char* name : {"namespace", "coordinator", "job_id", "rank"}) {
    if (!vars.contains(name)) {
      problems.push_back(absl::StrCat("variables: no ", name, " variable"));
      continue;
    }
    const auto& v = vars[name];
    if (!UsesDatasourceVariable(v)) {
      problems.push_back(absl::StrCat("variables: ", name, " does not use $datasource"));
    }
    const std::string q = VariableQuery(v);
    std::smatch m;
    if (!std::regex_search(q, m, std::regex(R"(^label_values\((.*),\s*(\w+)\)$)"))) {
      problems.push_back(
          absl::StrCat("variables: ", name, ": expected label_values(...), got '", q, "'"));
      continue;
    }
    check_metrics(absl::StrCat("variable ", name), m[1].str());
    if (std::string(name) == "job_id" || std::string(name) == "rank") {
      check_scoped(absl::StrCat("variable ", name), m[1].str());
    }
  }

  // Panels.
  const auto panels = AllPanels(dash);
  if (panels.empty()) problems.push_back("dashboard: no panels");
  for (const auto& p : panels) {
    const std::string title = p.value("title", "");
    const std::string where = absl::StrCat("panel ", p.value("id", 0), " '", title, "'");
    if (p.value("type", "") == "row") {
      if (title.empty()) problems.push_back(absl::StrCat(where, ": row without a title"));
      continue;
    }
    if (title.empty()) problems.push_back(absl::StrCat(where, ": no title"));
    if (p.value("description", "").empty())
      problems.push_back(absl::StrCat(where, ": no description"));
    const std::string unit =
        p.contains("fieldConfig")
            ? p["fieldConfig"].value("defaults", nlohmann::json::object()).value("unit", "")
            : "";
    if (unit.empty()) problems.push_back(absl::StrCat(where, ": no unit"));
    if (!UsesDatasourceVariable(p)) {
      problems.push_back(absl::StrCat(where, ": datasource is not the $datasource variable"));
    }
    const auto targets = p.value("targets", nlohmann::json::array());
    if (targets.empty()) problems.push_back(absl::StrCat(where, ": no queries"));
    for (const auto& t : targets) {
      const std::string twhere = absl::StrCat(where, " target ", t.value("refId", "?"));
      if (!UsesDatasourceVariable(t)) {
        problems.push_back(absl::StrCat(twhere, ": datasource is not the $datasource variable"));
      }
      const std::string expr = t.value("expr", "");
      if (expr.empty()) {
        problems.push_back(absl::StrCat(twhere, ": empty expr"));
        continue;
      }
      check_scoped(twhere, expr);
      // Every range in a rate-like call, and every range at all, is $__rate_interval.
      static const std::regex kRange(R"(\[([^\]]*)\])");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kRange);
           it != std::sregex_iterator(); ++it) {
        const std::string range = (*it)[1].str();
        if (range != "$__rate_interval" && range != "${__rate_interval}") {
          problems.push_back(
              absl::StrCat(twhere, ": range [", range, "] is not [$__rate_interval]"));
        }
      }
      static const std::regex kRateCall(R"(\b(rate|irate|increase)\s*\()");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kRateCall);
           it != std::sregex_iterator(); ++it) {
        // The call's argument, up to its matching parenthesis.
        size_t i = static_cast<size_t>(it->position() + it->length());
        int depth = 1;
        const size_t start = i;
        while (i < expr.size() && depth > 0) {
          if (expr[i] == '(') ++depth;
          if (expr[i] == ')') --depth;
          ++i;
        }
        const std::string arg = expr.substr(start, i - start);
        if (!absl::StrContains(arg, "[$__rate_interval]") &&
            !absl::StrContains(arg, "[${__rate_interval}]")) {
          problems.push_back(
              absl::StrCat(twhere, ": ", (*it)[1].str(), "() without [$__rate_interval]"));
        }
      }
      check_metrics(twhere, expr);
    }
  }
  return problems;
}

}  // namespace zpipe::testing
