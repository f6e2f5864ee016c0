#include "coordinator/server.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/artifact_service.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/prometheus_metrics.h"
#include "coordinator/sqlite_job_store.h"
#include "coordinator/worker_service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "util/log.h"

namespace zpipe::coordinator {

namespace {

// Refuses to serve callers who cannot be told apart (no tokens, no client certificates) on a
// non-loopback address unless --insecure; says in the log who is trusted and how.
absl::Status CheckCallersAuthenticated(const ServerOptions& options, const Authenticator& auth,
                                       const std::optional<ServerTlsPem>& tls) {
  const bool mutual_tls = tls.has_value() && tls->mutual();
  if (auth.enabled()) {
    LogInfo("authentication on: ", auth.Summary());
    return absl::OkStatus();
  }
  if (mutual_tls) {
    LogWarning("no token files: every caller with a certificate signed by --tls-client-ca ",
               options.tls.client_ca,
               " has every role (client, admin, worker); give token files to separate them");
    return absl::OkStatus();
  }
  std::vector<std::string> exposed;
  if (!IsLoopbackAddress(options.listen)) exposed.push_back("--listen " + options.listen);
  if (!options.metrics_listen.empty() && !IsLoopbackAddress(options.metrics_listen)) {
    exposed.push_back("--metrics-listen " + options.metrics_listen);
  }
  if (!exposed.empty() && !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        absl::StrJoin(exposed, " and "),
        ": not a loopback address, and no token files were given (--client-tokens, "
        "--worker-tokens, --admin-tokens) nor client certificates required "
        "(--tls-client-ca), so anyone who reaches it could submit and cancel jobs and pose as "
        "a worker",
        tls.has_value() ? " (TLS alone encrypts, it does not authenticate callers)" : "",
        ". Give token files or --tls-client-ca, listen on 127.0.0.1, or pass --insecure to "
        "serve without authentication anyway"));
  }
  if (!exposed.empty()) {
    LogWarning("INSECURE: no token files and ", absl::StrJoin(exposed, " and "),
               " is reachable from other hosts: anyone who reaches it can submit and cancel "
               "jobs and pose as a worker (--insecure)");
  } else {
    LogWarning(
        "no token files: every caller is trusted (serving on loopback only); give "
        "--client-tokens, --worker-tokens and --admin-tokens to require tokens");
  }
  return absl::OkStatus();
}

ManagerOptions ManagerOptionsFor(const ServerOptions& options) {
  ManagerOptions mopts;
  mopts.heartbeat_timeout = options.heartbeat_timeout;
  mopts.recovery_grace = options.recovery_grace;
  mopts.failure_grace = std::min(mopts.failure_grace, options.heartbeat_timeout);
  mopts.max_pending_jobs = options.max_pending_jobs;
  mopts.max_pending_jobs_per_client = options.max_pending_jobs_per_client;
  mopts.rendezvous = options.rendezvous;
  mopts.log_lines_per_rank = options.log_lines;
  mopts.workers = options.workers;
  mopts.retain_finished = options.retain_finished;
  mopts.retain_count = options.retain_count;
  mopts.python_models = options.allow_python_models || IsLoopbackAddress(options.listen);
  if (mopts.python_models && !IsLoopbackAddress(options.listen)) {
    LogWarning("--allow-python-models: jobs with a Python model run their code on the workers, "
               "with the workers' rights");
  }
  mopts.heartbeat_interval = options.heartbeat_interval > absl::ZeroDuration()
                                 ? options.heartbeat_interval
                                 : options.heartbeat_timeout / 5;
  return mopts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const ServerOptions& options) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = options;
  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(options.tokens);
  if (!auth.ok()) return auth.status();
  s->auth_ = std::move(*auth);
  std::optional<ServerTlsPem> tls;
  if (options.tls.enabled()) {
    absl::StatusOr<ServerTlsPem> loaded = LoadServerTls(options.tls);
    if (!loaded.ok()) return loaded.status();
    tls = *std::move(loaded);
  }
  if (absl::Status st = CheckCallersAuthenticated(options, *s->auth_, tls); !st.ok()) return st;
  if (tls.has_value()) {
    LogInfo("TLS on: gRPC and HTTPS with ", options.tls.cert,
            tls->mutual() ? absl::StrCat(", client certificates signed by ", options.tls.client_ca,
                                         " required on both ports")
                          : ", no client certificates");
  }
  const ServerTlsPem* pem = tls.has_value() ? &*tls : nullptr;
  if (absl::Status st = s->StartManager(); !st.ok()) return st;
  if (absl::Status st = s->StartHttp(pem); !st.ok()) return st;
  if (absl::Status st = s->OpenArtifacts(); !st.ok()) return st;
  if (absl::Status st = s->StartGrpc(pem); !st.ok()) return st;
  if (absl::Status st = s->StartHealth(); !st.ok()) return st;
  s->liveness_ = std::thread([raw = s.get()] { raw->LivenessLoop(); });
  LogInfo("coordinator serving on port ", s->port_, tls.has_value() ? " over TLS" : "",
          " (metrics ", s->metrics_port_ ? absl::StrCat("on port ", s->metrics_port_) : "disabled",
          ", health ",
          s->health_port_ ? absl::StrCat("on port ", s->health_port_) : "on the gRPC port only",
          ", db ", options.db,
          s->artifacts_ ? absl::StrCat(", artifacts in ", s->artifacts_->options().dir) : "",
          ", heartbeat timeout ", absl::FormatDuration(options.heartbeat_timeout), ")");
  return s;
}

absl::Status CoordinatorServer::StartManager() {
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(options_.db);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<PrometheusMetrics>(*registry_);
  manager_ = std::make_unique<JobManager>(clock_, *store_, *metrics_, ManagerOptionsFor(options_));
  return manager_->Load();
}

absl::Status CoordinatorServer::StartHttp(const ServerTlsPem* tls) {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  // /metrics plus the live page and its JSON API on one port.
  auto http = HttpServer::Start(options_.metrics_listen, registry_, *manager_, *auth_, tls,
                                options_.http_limits);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  metrics_port_ = http_->port();
  return absl::OkStatus();
}

absl::Status CoordinatorServer::OpenArtifacts() {
  ArtifactStoreOptions artifact_options = options_.artifacts;
  if (artifact_options.dir.empty() && options_.db != ":memory:") {
    artifact_options.dir =
        (std::filesystem::path(options_.db).parent_path() / "artifacts").string();
  }
  if (artifact_options.dir.empty()) return absl::OkStatus();
  auto artifacts = ArtifactStore::Open(artifact_options);
  if (!artifacts.ok()) return artifacts.status();
  artifacts_ = std::move(*artifacts);
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartGrpc(const ServerTlsPem* tls) {
  artifact_service_ = std::make_unique<ArtifactServiceImpl>(artifacts_.get(), *metrics_, *auth_);
  client_service_ =
      std::make_unique<CoordinatorServiceImpl>(*manager_, *metrics_, *auth_, artifacts_.get());
  worker_service_ = std::make_unique<WorkerServiceImpl>(*manager_, *metrics_, *auth_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls != nullptr) {
    grpc::SslServerCredentialsOptions ssl(
        tls->mutual() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                      : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = tls->client_ca;
    ssl.pem_key_cert_pairs.push_back({tls->private_key, tls->cert_chain});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options_.listen, credentials, &port_);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(-1);
  // Keep per-stream receive windows at their initial size: a worker that sends progress faster
  // than it is applied is slowed by flow control instead of queueing megabytes per stream here,
  // which would starve everything else (GetJob) under a flood.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.RegisterService(client_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.RegisterService(artifact_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", options_.listen));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartHealth() {
  if (options_.health_listen.empty()) return absl::OkStatus();
  // gRPC serves its default health service only next to a synchronous service; this one
  // answers UNIMPLEMENTED to everything, so the port exposes nothing but health.
  static v1::WorkerService::Service placeholder;
  grpc::ServerBuilder health;
  health.AddListeningPort(options_.health_listen, grpc::InsecureServerCredentials(), &health_port_);
  health.RegisterService(&placeholder);
  health_ = health.BuildAndStart();
  if (!health_ || health_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--health-listen ", options_.health_listen, ": cannot listen"));
  }
  health_->GetHealthCheckService()->SetServingStatus(true);
  return absl::OkStatus();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

absl::Status CoordinatorServer::ReloadTokens() {
  if (!auth_->enabled()) {
    LogInfo("no token files to reload");
    return absl::OkStatus();
  }
  absl::Status st = auth_->Reload();
  if (st.ok()) {
    LogInfo("token files reloaded: ", auth_->Summary());
  } else {
    LogError("token files not reloaded, the previous tokens stay in force: ", st.message());
  }
  return st;
}

void CoordinatorServer::LivenessLoop() {
  const absl::Duration tick =
      std::clamp(options_.heartbeat_timeout / 4, absl::Milliseconds(20), absl::Seconds(1));
  // Artifacts are swept every retention/2 (1 s to 1 min), the first time at once.
  const absl::Duration sweep_every =
      artifacts_ == nullptr ? absl::InfiniteDuration()
                            : std::clamp(artifacts_->options().retention / 2, absl::Seconds(1),
                                         absl::Minutes(1));
  absl::Time next_sweep = absl::InfinitePast();
  while (!stop_.WaitForNotificationWithTimeout(tick)) {
    manager_->CheckLiveness();
    if (artifacts_ != nullptr && absl::Now() >= next_sweep) {
      SweepArtifacts(*artifacts_, *manager_, absl::Now());
      next_sweep = absl::Now() + sweep_every;
    }
  }
}

void CoordinatorServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const absl::Time start = absl::Now();
  LogInfo("coordinator shutting down");
  // Liveness stops first: while sessions drain, heartbeats go unread, and a job must not fail
  // for "no heartbeat" because its coordinator is stopping (a restart resumes it).
  stop_.Notify();
  if (liveness_.joinable()) liveness_.join();
  if (manager_) manager_->Shutdown();
  if (server_)
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  if (health_) health_->Shutdown(std::chrono::system_clock::now());
  http_.reset();
  LogInfo("coordinator stopped in ", absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                                       absl::Milliseconds(1))));
}

void CoordinatorServer::Wait() { stop_.WaitForNotification(); }

}  // namespace zpipe::coordinator
