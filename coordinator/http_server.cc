#include "coordinator/http_server.h"

#include <CivetServer.h>

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/json.h"
#include "coordinator/job_logs.h"
#include "coordinator/job_proto.h"
#include "coordinator/trace_proto.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "util/process_metrics.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::coordinator {
namespace {

void Reply(mg_connection* conn, int code, const std::string& type, const std::string& body) {
  const char* reason = code == 200   ? "OK"
                       : code == 404 ? "Not Found"
                       : code == 400 ? "Bad Request"
                       : code == 401 ? "Unauthorized"
                       : code == 403 ? "Forbidden"
                                     : "Error";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, reason, type.c_str(), body.size());
  mg_write(conn, body.data(), body.size());
}

int HttpCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    default:
      return 500;
  }
}

// Every /api answer, errors included, is one JSON document of the vocabulary (api/json.h).
void ReplyJson(mg_connection* conn, int code, const api::Json& value) {
  Reply(conn, code, "application/json", api::Dump(value, /*pretty=*/false) + "\n");
}

void ReplyError(mg_connection* conn, const absl::Status& status) {
  ReplyJson(conn, HttpCode(status), api::ErrorJson(status));
}

}  // namespace

class HttpServer::Handler : public CivetHandler {
 public:
  Handler(std::shared_ptr<prometheus::Registry> registry, JobManager& manager,
          const Authenticator& auth)
      : registry_(std::move(registry)), manager_(manager), auth_(auth) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    const mg_request_info* info = mg_get_request_info(conn);
    const std::string path = info->local_uri != nullptr ? info->local_uri : "/";
    const std::string query = info->query_string != nullptr ? info->query_string : "";
    if (path == "/metrics") {
      std::vector<prometheus::MetricFamily> families = registry_->Collect();
      for (prometheus::MetricFamily& f : util::ProcessMetricFamilies()) {
        families.push_back(std::move(f));
      }
      Reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8",
            prometheus::TextSerializer().Serialize(families));
      return true;
    }
    if (path == "/healthz") {
      Reply(conn, 200, "text/plain; charset=utf-8", "ok\n");
      return true;
    }
    if (path == "/readyz") {  // not ready while the job store refuses writes
      const absl::Status store = manager_.StoreStatus();
      Reply(conn, store.ok() ? 200 : 503, "text/plain; charset=utf-8",
            store.ok() ? "ok\n" : absl::StrCat(store.message(), "\n"));
      return true;
    }
    if (absl::Status st = Authorized(conn, query); !st.ok()) {
      ReplyError(conn, st);
      return true;
    }
    if (path == "/" || path == "/index.html") {
      Reply(conn, 200, "text/html; charset=utf-8", LivePageHtml());
    } else if (path == "/api/jobs") {
      absl::StatusOr<ListResult> list = manager_.List({}, 1000, "");
      if (!list.ok()) return ReplyError(conn, list.status()), true;
      std::vector<v1::Job> jobs;
      for (const JobView& job : list->jobs) jobs.push_back(JobViewToProto(job));
      ReplyJson(conn, 200, api::JobListJson(jobs));
    } else if (absl::StartsWith(path, "/api/jobs/")) {
      std::vector<std::string> parts = absl::StrSplit(path.substr(10), '/');
      if (parts.size() == 1) {
        absl::StatusOr<JobView> job = manager_.Get(parts[0], /*with_microbatches=*/false);
        if (!job.ok()) return ReplyError(conn, job.status()), true;
        ReplyJson(conn, 200, api::JobJson(JobViewToProto(*job)));
      } else if (parts.size() == 2 && parts[1] == "logs") {
        ServeLogs(conn, parts[0], query);
      } else if (parts.size() == 2 && parts[1] == "trace") {
        std::optional<int> iteration;
        char value[32];
        if (mg_get_var(query.c_str(), query.size(), "iteration", value, sizeof(value)) > 0) {
          int n = 0;
          if (!absl::SimpleAtoi(value, &n)) {
            return ReplyError(conn, absl::InvalidArgumentError("iteration: not a number")), true;
          }
          iteration = n;
        }
        absl::StatusOr<TraceView> view = manager_.Trace(parts[0], iteration);
        if (!view.ok()) return ReplyError(conn, view.status()), true;
        v1::GetTraceResponse resp;
        TraceToProto(parts[0], *view, &resp);
        ReplyJson(conn, 200, api::TraceJson(resp));
      } else {
        ReplyError(conn, absl::NotFoundError(absl::StrCat("no page ", path)));
      }
    } else {
      ReplyError(conn, absl::NotFoundError(absl::StrCat("no page ", path)));
    }
    return true;
  }

 private:
  // /api/jobs/ID/logs[?rank=R&tail=N]: the job's log lines as text, one per line (no follow:
  // `zpipe logs --follow` streams).
  void ServeLogs(mg_connection* conn, const std::string& job_id, const std::string& query) {
    JobLogsRequest request;
    request.job_id = job_id;
    for (const char* name : {"rank", "tail"}) {
      char value[32];
      if (mg_get_var(query.c_str(), query.size(), name, value, sizeof(value)) <= 0) continue;
      int n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return ReplyError(
            conn, absl::InvalidArgumentError(absl::StrCat(name, ": not a number: '", value, "'")));
      }
      if (std::string(name) == "rank") {
        request.rank = n;
      } else {
        request.tail = n;
      }
    }
    std::string body;
    uint64_t dropped = 0;
    absl::Status st = StreamJobLogs(
        manager_, request,
        [&](const LogRead& batch, int p) {
          dropped = batch.dropped;
          for (const LogLineData& line : batch.lines) {
            absl::StrAppend(&body, FormatLogLine(line, p), "\n");
          }
          return true;
        },
        [] { return false; });
    if (!st.ok()) return ReplyError(conn, st);
    if (dropped > 0) {
      body =
          absl::StrCat("(", dropped, " older lines were dropped: the coordinator keeps the newest ",
                       manager_.logs().lines_per_rank(), " per rank)\n", body);
    }
    Reply(conn, 200, "text/plain; charset=utf-8", body);
  }

  // The page and /api are for clients: a token from the Authorization header, else ?token=.
  absl::Status Authorized(mg_connection* conn, const std::string& query) const {
    if (!auth_.enabled()) return absl::OkStatus();
    std::optional<std::string> authorization;
    if (const char* header = mg_get_header(conn, "Authorization"); header != nullptr) {
      authorization = header;
    } else {
      std::vector<char> token(4200);
      if (mg_get_var(query.c_str(), query.size(), "token", token.data(), token.size()) > 0) {
        authorization = absl::StrCat("Bearer ", token.data());
      }
    }
    absl::StatusOr<Principal> caller = auth_.Authenticate(authorization);
    if (!caller.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat(caller.status().message(),
                       "; send Authorization: Bearer TOKEN, or open the page as /?token=TOKEN"));
    }
    return Authorize(*caller, Role::kClient, "read the live page or /api");
  }

  std::shared_ptr<prometheus::Registry> registry_;
  JobManager& manager_;
  const Authenticator& auth_;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& host_port, std::shared_ptr<prometheus::Registry> registry,
    JobManager& manager, const Authenticator& auth, const ServerTlsPem* tls,
    const RelayLimits& limits) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->handler_ = std::make_unique<Handler>(std::move(registry), manager, auth);
  // civetweb serves a loopback port and the relay the public one (tls_relay.h: with TLS it ends
  // TLS; either way it holds each connection until its request head is complete and enforces
  // the connection limits, so slow or idle connections never reach civetweb's threads).
  try {
    // request_timeout_ms guards the loopback port itself against a local slow client.
    std::vector<std::string> options = {"listening_ports", "127.0.0.1:0", "num_threads", "8",
                                        "request_timeout_ms", "10000"};
    s->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("http: cannot listen on 127.0.0.1:0: ", e.what()));
  }
  if (s->server_->getContext() == nullptr) {
    return absl::UnavailableError("http: cannot listen on 127.0.0.1:0");
  }
  s->server_->addHandler("/", s->handler_.get());
  std::vector<int> ports = s->server_->getListeningPorts();
  s->backend_port_ = ports.empty() ? 0 : ports.front();
  absl::StatusOr<std::unique_ptr<TlsRelay>> relay =
      TlsRelay::Start(host_port, s->backend_port_, tls, limits);
  if (!relay.ok()) return relay.status();
  s->relay_ = *std::move(relay);
  s->port_ = s->relay_->port();
  return s;
}

HttpServer::~HttpServer() {
  relay_.reset();  // no more relayed requests
  if (server_) server_->close();
}

}  // namespace zpipe::coordinator
