// CoordinatorServer: wires store, metrics, job manager and the gRPC services into a running
// coordinator (plus grpc.health.v1, server reflection and the HTTP port: /metrics, the live
// page at / and its JSON API, see http_server.h).
// `zpipe-coordinator` is a thin main around it; tests start it in-process on port 0.
//
// Authentication (auth.h): with token files every gRPC call and the HTTP port's live page and
// /api need a token (/metrics and grpc.health.v1 stay open). Without token files the coordinator
// trusts every caller, so it refuses to listen beyond loopback unless `insecure` is set.
//
// TLS (tls.h): with a certificate both ports speak only TLS (gRPC and HTTPS); with a client CA
// both also require a client certificate it signed, which counts as authentication for the
// loopback rule (every such caller then has every role unless token files are given too).
#ifndef ZPIPE_COORDINATOR_SERVER_H_
#define ZPIPE_COORDINATOR_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/artifact_store.h"
#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/http_server.h"
#include "coordinator/job_manager.h"
#include "coordinator/tls.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace zpipe::coordinator {

class ArtifactServiceImpl;
class CoordinatorServiceImpl;
class WorkerServiceImpl;
class JobStore;
class Metrics;

// What SIGTERM gives in-flight calls: short, so the coordinator exits within 1 s
// (tests/worker/reconnect_e2e_test.cc); nothing is acknowledged before it is stored.
inline constexpr absl::Duration kShutdownGrace = absl::Milliseconds(200);

// The coordinator's flags (main.cc). A default the job manager has too is the manager's
// (ManagerOptions), so the two cannot drift apart.
struct ServerOptions {
  std::string listen = "127.0.0.1:50051";         // gRPC; port 0 = pick a free one
  std::string metrics_listen = "127.0.0.1:9464";  // /metrics; empty = disabled
  // grpc.health.v1 alone, in plaintext (the kubelet's gRPC probe cannot speak TLS); empty =
  // disabled. The --listen port serves it too.
  std::string health_listen;
  RelayLimits http_limits;  // connection limits of the HTTP port (tls_relay.h)
  std::string db = "zpipe-coordinator.db";        // SQLite file, or ":memory:"
  absl::Duration heartbeat_timeout = ManagerOptions{}.heartbeat_timeout;
  // After a restart, how long RUNNING jobs wait for their workers (ManagerOptions). Workers
  // re-register within 1 s of the coordinator's return (reconnect_e2e_test measures it; about
  // 0.3 s on loopback), and a Kubernetes Service routes to the new pod only once its startup
  // probe passed (every 2 s): 10 s leaves room for both several times over.
  absl::Duration recovery_grace = absl::Seconds(10);
  absl::Duration heartbeat_interval = absl::ZeroDuration();  // 0 = timeout / 5
  // Limits (docs/operations.md "Security"): each refusal is RESOURCE_EXHAUSTED naming its flag.
  int max_message_bytes = 16 << 20;  // larger requests are refused by gRPC itself
  // A new job beyond this many PENDING ones is refused, or beyond this many of its submitter's.
  int max_pending_jobs = ManagerOptions{}.max_pending_jobs;
  int max_pending_jobs_per_client = ManagerOptions{}.max_pending_jobs_per_client;
  RendezvousLimits rendezvous;       // per-job key and byte quota, and the total cap
  size_t log_lines = JobLogStore::kDefaultLinesPerRank;  // worker log lines kept per rank
  WorkerLimits workers;  // --max-workers, --max-dead-workers, --dead-worker-retention
  // Finished jobs kept (ManagerOptions): --retain-finished (0 = forever), --retain-count (0 = all).
  absl::Duration retain_finished = absl::ZeroDuration();
  int retain_count = 0;
  TokenFiles tokens;      // none = no authentication (loopback only, unless `insecure`)
  ServerTlsFiles tls;     // none = plaintext on both ports
  bool insecure = false;  // allow a non-loopback listen address without tokens or mTLS
  // Accept jobs with a Python model (model.python), whose code the workers run. A coordinator
  // listening on loopback accepts them anyway: whoever can submit there runs code on this host
  // already.
  bool allow_python_models = false;
  // Uploaded artifacts (artifact_store.h): dir empty = "artifacts" beside the --db file, none
  // with --db :memory:.
  ArtifactStoreOptions artifacts;
};

class CoordinatorServer {
 public:
  // Opens the store, restores jobs, binds both ports and starts serving. FailedPrecondition for a
  // non-loopback address without token files or client certificates (and without `insecure`);
  // the error of a token or TLS file that cannot be read (naming its flag and path).
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(const ServerOptions& options);
  ~CoordinatorServer();  // Shutdown()

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }  // 0 when disabled
  int health_port() const { return health_port_; }    // 0 when disabled
  JobManager& manager() { return *manager_; }

  // Re-reads the token files (SIGHUP). On error the previous tokens stay in force; either way
  // the outcome is logged.
  absl::Status ReloadTokens();

  // Stops the liveness loop, stores what is unsaved, stops serving (in-flight calls get up to
  // `grace`, then are cancelled; long-lived streams always run to it) and closes the HTTP and
  // health ports. Workers are not told to stop: their jobs run on. Idempotent.
  void Shutdown(absl::Duration grace = kShutdownGrace);
  // Blocks until Shutdown() has been called.
  void Wait();

 private:
  CoordinatorServer() = default;
  // The steps of Start(), in order. `tls`: null for plaintext.
  absl::Status StartManager();  // the store, the metrics, the job manager (jobs restored)
  absl::Status StartHttp(const ServerTlsPem* tls);  // --metrics-listen: /metrics, page, /api
  absl::Status OpenArtifacts();                     // uploaded files
  absl::Status StartGrpc(const ServerTlsPem* tls);  // the services on --listen
  absl::Status StartHealth();                       // --health-listen
  void LivenessLoop();

  ServerOptions options_;
  RealClock clock_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<JobStore> store_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<ArtifactStore> artifacts_;  // null: none
  std::unique_ptr<ArtifactServiceImpl> artifact_service_;
  std::unique_ptr<CoordinatorServiceImpl> client_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_;  // --health-listen: grpc.health.v1 only, plaintext
  std::unique_ptr<HttpServer> http_;  // /metrics, the live page and /api
  int port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  absl::Notification stop_;
  std::thread liveness_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_SERVER_H_
