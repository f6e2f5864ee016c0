// HttpServer: the coordinator's HTTP port (--metrics-listen). Serves
//   /metrics                 Prometheus text from the registry (what prometheus::Exposer served)
//   /                        the live page: jobs with state and progress, and the selected (by
//                            default the newest running) job's latest executed timeline beside
//                            the plan's predicted one, refreshed every second (inline HTML + JS)
//   /api/jobs                ListJobs as JSON (proto field names)
//   /api/jobs/ID             GetJob as JSON
//   /api/jobs/ID/trace       GetTrace as JSON; ?iteration=N for a given iteration
//   /healthz                 "ok" while the coordinator serves
// When `auth` has tokens, / and /api/* need a client or admin token, sent as
// `Authorization: Bearer TOKEN` or, for a browser opening the page, as `?token=TOKEN` (the page
// passes it on to /api); 401 without a known token, 403 for a worker token. /metrics (Prometheus
// convention) and /healthz stay open.
// With `tls` the port speaks only HTTPS (tls_relay.h: TLS is ended there and relayed to civetweb
// on a loopback port); with a client CA in it, only to callers presenting a certificate that CA
// signed. The loopback port serves the same pages without TLS to local processes (with token
// files, the page and /api still need a token there).
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
  // null. `registry`, `manager` and `auth` must outlive the server. Unavailable when it cannot
  // listen.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host_port, std::shared_ptr<prometheus::Registry> registry,
      JobManager& manager, const Authenticator& auth, const ServerTlsPem* tls = nullptr);
  ~HttpServer();  // stops serving

  int port() const { return port_; }

 private:
  class Handler;
  HttpServer() = default;

  std::unique_ptr<Handler> handler_;
  std::unique_ptr<TlsRelay> relay_;  // with TLS: the public port, relaying to server_
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
};

// The live page (for tests and the handler).
const char* LivePageHtml();

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_HTTP_SERVER_H_
