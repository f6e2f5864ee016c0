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
  const bool mutual_tls = tls.has_value() && tls->mutual();
  if (!s->auth_->enabled() && !mutual_tls) {
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
  } else if (!s->auth_->enabled()) {
    LogWarning("no token files: every caller with a certificate signed by --tls-client-ca ",
               options.tls.client_ca,
               " has every role (client, admin, worker); give token files to separate them");
  } else {
    LogInfo("authentication on: ", s->auth_->Summary());
  }
  if (tls.has_value()) {
    LogInfo("TLS on: gRPC and HTTPS with ", options.tls.cert,
            mutual_tls ? absl::StrCat(", client certificates signed by ", options.tls.client_ca,
                                      " required on both ports")
                       : ", no client certificates");
  }
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(options.db);
  if (!store.ok()) return store.status();
  s->store_ = std::move(*store);

  s->registry_ = std::make_shared<prometheus::Registry>();
  s->metrics_ = std::make_unique<PrometheusMetrics>(*s->registry_);
  ManagerOptions mopts;
  mopts.heartbeat_timeout = options.heartbeat_timeout;
  mopts.recovery_grace = options.recovery_grace;
  mopts.failure_grace = std::min(mopts.failure_grace, options.heartbeat_timeout);
  mopts.max_pending_jobs = options.max_pending_jobs;
  mopts.max_pending_jobs_per_client = options.max_pending_jobs_per_client;
  mopts.rendezvous = options.rendezvous;
  mopts.log_lines_per_rank = options.log_lines;
  mopts.heartbeat_interval = options.heartbeat_interval > absl::ZeroDuration()
                                 ? options.heartbeat_interval
                                 : options.heartbeat_timeout / 5;
  s->manager_ = std::make_unique<JobManager>(s->clock_, *s->store_, *s->metrics_, mopts);
  if (absl::Status st = s->manager_->Load(); !st.ok()) return st;

  if (!options.metrics_listen.empty()) {
    // /metrics plus the live page and its JSON API on one port.
    auto http = HttpServer::Start(options.metrics_listen, s->registry_, *s->manager_, *s->auth_,
                                  tls.has_value() ? &*tls : nullptr, options.http_limits);
    if (!http.ok()) return http.status();
    s->http_ = std::move(*http);
    s->metrics_port_ = s->http_->port();
  }

  ArtifactStoreOptions artifact_options = options.artifacts;
  if (artifact_options.dir.empty() && options.db != ":memory:") {
    artifact_options.dir = (std::filesystem::path(options.db).parent_path() / "artifacts").string();
  }
  if (!artifact_options.dir.empty()) {
    auto artifacts = ArtifactStore::Open(artifact_options);
    if (!artifacts.ok()) return artifacts.status();
    s->artifacts_ = std::move(*artifacts);
  }
  s->artifact_service_ =
      std::make_unique<ArtifactServiceImpl>(s->artifacts_.get(), *s->metrics_, *s->auth_);
  s->client_service_ = std::make_unique<CoordinatorServiceImpl>(*s->manager_, *s->metrics_,
                                                                *s->auth_, s->artifacts_.get());
  s->worker_service_ = std::make_unique<WorkerServiceImpl>(*s->manager_, *s->metrics_, *s->auth_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls.has_value()) {
    grpc::SslServerCredentialsOptions ssl(
        mutual_tls ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = tls->client_ca;
    ssl.pem_key_cert_pairs.push_back({tls->private_key, tls->cert_chain});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(options.listen, credentials, &s->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(-1);
  // Keep per-stream receive windows at their initial size: a worker that sends progress faster
  // than it is applied is slowed by flow control instead of queueing megabytes per stream here,
  // which would starve everything else (GetJob) under a flood.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.RegisterService(s->client_service_.get());
  builder.RegisterService(s->worker_service_.get());
  builder.RegisterService(s->artifact_service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", options.listen));
  }
  if (!options.health_listen.empty()) {
    // gRPC serves its default health service only next to a synchronous service; this one
    // answers UNIMPLEMENTED to everything, so the port exposes nothing but health.
    static v1::WorkerService::Service placeholder;
    grpc::ServerBuilder health;
    health.AddListeningPort(options.health_listen, grpc::InsecureServerCredentials(),
                            &s->health_port_);
    health.RegisterService(&placeholder);
    s->health_ = health.BuildAndStart();
    if (!s->health_ || s->health_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("--health-listen ", options.health_listen, ": cannot listen"));
    }
    s->health_->GetHealthCheckService()->SetServingStatus(true);
  }
  s->liveness_ = std::thread([raw = s.get()] { raw->LivenessLoop(); });
  LogInfo("coordinator serving on port ", s->port_, tls.has_value() ? " over TLS" : "",
          " (metrics ", s->metrics_port_ ? absl::StrCat("on port ", s->metrics_port_) : "disabled",
          ", health ",
          s->health_port_ ? absl::StrCat("on port ", s->health_port_) : "on the gRPC port only",
          ", db ", options.db,
          s->artifacts_ ? absl::StrCat(", artifacts in ", s->artifacts_->options().dir) : "",
          ", heartbeat timeout ",
          absl::FormatDuration(options.heartbeat_timeout), ")");
  return s;
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
