// HttpServer: the coordinator's HTTP port (--metrics-listen). Serves
//   /metrics                 Prometheus text from the registry (what prometheus::Exposer served)
//   /                        the live page: jobs with state and progress, and the selected (by
//                            default the newest running) job's latest executed timeline beside
//                            the plan's predicted one, refreshed every second (inline HTML + JS)
//   /api/jobs                {"jobs": [job, ...]}, as `zpipe list -o json` prints it
//   /api/jobs/ID             the job, as `zpipe status ID -o json` prints it
//   /api/jobs/ID/trace       GetTrace; ?iteration=N for a given iteration
// /api speaks the JSON vocabulary of `zpipe -o json` (api/json.h, docs/json.md), errors
// included: {"code": "NOT_FOUND", "message": "..."} with the HTTP status for the code.
//   /healthz                 "ok" while the coordinator serves
//   /readyz                  "ok", or 503 saying why while the job store refuses writes (full)
// When `auth` has tokens, / and /api/* need a client or admin token, sent as
// `Authorization: Bearer TOKEN` or, for a browser opening the page, as `?token=TOKEN` (the page
// passes it on to /api); 401 without a known token, 403 for a worker token. /metrics (Prometheus
// convention), /healthz and /readyz stay open.
// The public port is a relay (tls_relay.h) in front of civetweb on a loopback port: it passes a
// connection on only once its request head is complete, caps connections per peer address and
// in all, and closes idle ones first, so slow or idle connections cannot starve civetweb's
// threads. With `tls` the port speaks only HTTPS (the relay ends TLS); with a client CA in it,
// only to callers presenting a certificate that CA signed. The loopback port serves the same
// pages without TLS to local processes (with token files, the page and /api still need a token
// there). Liveness probes should use grpc.health.v1 (server.h, --health-listen), not /healthz.
// prometheus::Exposer has no hook for extra pages, so this replaces it, on civetweb (the server
// the Exposer itself uses). Thread-safe; handlers run on civetweb's threads.
#ifndef ZPIPE_COORDINATOR_HTTP_SERVER_H_
#define ZPIPE_COORDINATOR_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/tls.h"
#include "coordinator/tls_relay.h"

class CivetServer;
namespace prometheus {
class Registry;
}

namespace zpipe::coordinator {

class HttpServer {
 public:
  // Listens on `host_port` ("127.0.0.1:9464"; port 0 = pick one), over TLS when `tls` is not
  // null, with `limits` on connections. `registry`, `manager` and `auth` must outlive the
  // server. Unavailable when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host_port, std::shared_ptr<prometheus::Registry> registry,
      JobManager& manager, const Authenticator& auth, const ServerTlsPem* tls = nullptr,
      const RelayLimits& limits = {});
  ~HttpServer();  // stops serving

  int port() const { return port_; }           // the public port
  int backend_port() const { return backend_port_; }  // civetweb's, on 127.0.0.1

 private:
  class Handler;
  HttpServer() = default;

  std::unique_ptr<Handler> handler_;
  std::unique_ptr<TlsRelay> relay_;  // the public port, relaying to server_
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
  int backend_port_ = 0;
};

// The live page (for tests and the handler).
const char* LivePageHtml();

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_HTTP_SERVER_H_
