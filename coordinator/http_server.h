// HttpServer: the coordinator's HTTP port (--metrics-listen). Serves
//   /metrics                 Prometheus text from the registry (what prometheus::Exposer served)
//   /                        the live page: jobs with state and progress, and the selected (by
//                            default the newest running) job's latest executed timeline beside
//                            the plan's predicted one, refreshed every second (inline HTML + JS)
//   /api/jobs                ListJobs as JSON (proto field names)
//   /api/jobs/ID             GetJob as JSON
//   /api/jobs/ID/trace       GetTrace as JSON; ?iteration=N for a given iteration
// prometheus::Exposer has no hook for extra pages, so this replaces it, on civetweb (the server
// the Exposer itself uses). Thread-safe; handlers run on civetweb's threads.
#ifndef ZPIPE_COORDINATOR_HTTP_SERVER_H_
#define ZPIPE_COORDINATOR_HTTP_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/job_manager.h"

class CivetServer;
namespace prometheus {
class Registry;
}

namespace zpipe::coordinator {

class HttpServer {
 public:
  // Listens on `host_port` ("0.0.0.0:9464"; port 0 = pick one). `registry` and `manager` must
  // outlive the server. Unavailable when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& host_port, std::shared_ptr<prometheus::Registry> registry,
      JobManager& manager);
  ~HttpServer();  // stops serving

  int port() const { return port_; }

 private:
  class Handler;
  HttpServer() = default;

  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
};

// The live page (for tests and the handler).
const char* LivePageHtml();

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_HTTP_SERVER_H_
