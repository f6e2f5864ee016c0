// zpipe-coordinator: the ZeroPipe control plane. See coordinator/server.h and --help.
#include <csignal>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>

#include "util/log.h"
#include "coordinator/server.h"
#include "flags/flags.h"

namespace {

using zpipe::coordinator::ServerOptions;

// A CLI11 group name: one line.
constexpr char kLimits[] =
    "limits (refusals are RESOURCE_EXHAUSTED naming the flag; SIZE is bytes, or with KiB, MiB, "
    "GiB)";

constexpr char kExitStatus[] =
    "exit status: 2 for a bad flag, or a file a flag names that is unusable (e.g. a --tls-key\n"
    "that does not belong to --tls-cert); 1 when it cannot start otherwise";

// Where it listens and keeps its state, and who may talk to it.
void AddServiceFlags(CLI::App& app, ServerOptions& o) {
  using zpipe::flags::AddText;
  AddText(app, "--listen", &o.listen, "HOST:PORT", "gRPC address (default 127.0.0.1:50051)");
  AddText(app, "--metrics-listen", &o.metrics_listen, "HOST:PORT",
          "HTTP: /metrics, the live page and /api, '' to disable (default 127.0.0.1:9464)");
  AddText(app, "--health-listen", &o.health_listen, "HOST:PORT",
          "serve grpc.health.v1 alone there, in plaintext, for probes (default: off; --listen "
          "serves it too)");
  AddText(app, "--db", &o.db, "PATH",
          "SQLite job store, or :memory: (default zpipe-coordinator.db)");
  zpipe::flags::AddDuration(app, "--heartbeat-timeout", &o.heartbeat_timeout,
                            "worker liveness timeout, e.g. 10s, 500ms (default 10s)");
  zpipe::flags::AddDuration(app, "--recovery-grace", &o.recovery_grace,
                            "after a restart, how long RUNNING jobs wait for their workers to "
                            "reconnect (default 10s; workers are back within 1s of the "
                            "coordinator's return)");
  AddText(app, "--client-tokens", &o.tokens.client, "FILE",
          "tokens of clients (submit, read, cancel their own jobs)");
  AddText(app, "--admin-tokens", &o.tokens.admin, "FILE",
          "tokens of admins (what clients may, and cancel any job)");
  AddText(app, "--worker-tokens", &o.tokens.worker, "FILE",
          "tokens of workers (register, report, rendezvous). Each token file has one token "
          "per line, optionally NAME:TOKEN, and is reloaded on SIGHUP. Without any, every caller "
          "is trusted and only loopback addresses may be listened on");
  AddText(app, "--tls-cert", &o.tls.cert, "FILE",
          "serve gRPC and the HTTP port over TLS (HTTPS) with this PEM certificate chain ...");
  AddText(app, "--tls-key", &o.tls.key, "FILE", "... and its PEM private key");
  AddText(app, "--tls-client-ca", &o.tls.client_ca, "FILE",
          "also require client certificates signed by this PEM CA on both ports (mTLS; counts "
          "as authentication for --listen)");
  zpipe::flags::AddSwitch(app, "--insecure", &o.insecure,
                          "listen beyond loopback without token files or --tls-client-ca anyway");
  zpipe::flags::AddSwitch(app, "--allow-python-models", &o.allow_python_models,
                          "accept jobs whose model is Python code (model.python), which the "
                          "workers run with their own rights; always on when --listen is "
                          "loopback");
  AddText(app, "--artifact-dir", &o.artifacts.dir, "DIR",
          "where uploaded models and token files are kept (`zpipe submit --upload`; default: "
          "artifacts/ beside --db)");
  zpipe::flags::AddDuration(app, "--artifact-retention", &o.artifacts.retention,
                            "keep an artifact this long after the last job naming it ended, or "
                            "after its upload (default 1h)");
}

// What one client, one job or all of them may hold. Sizes take a unit, counts do not; all but the
// totals fit gRPC's int.
void AddLimitFlags(CLI::App& app, ServerOptions& o) {
  using zpipe::flags::AddDuration;
  using zpipe::flags::AddInteger;
  using zpipe::flags::AddSize;
  constexpr int64_t kInt = std::numeric_limits<int>::max();
  constexpr int64_t kInt64 = std::numeric_limits<int64_t>::max();
  AddSize(app, "--max-message-bytes", &o.max_message_bytes, kInt,
          "largest gRPC request accepted (default 16MiB)")
      ->group(kLimits);
  AddInteger(app, "--max-pending-jobs", &o.max_pending_jobs, 1, kInt,
             "new jobs refused while N are PENDING (default 1000)")
      ->group(kLimits);
  AddInteger(app, "--max-pending-jobs-per-client", &o.max_pending_jobs_per_client, 1, kInt,
             "... or while N of the same client token are (default 100; without token files "
             "only the limit above applies)")
      ->group(kLimits);
  AddSize(app, "--rendezvous-job-bytes", &o.rendezvous.job_bytes, kInt,
          "rendezvous keys + values one job may hold (default 64MiB)")
      ->group(kLimits);
  AddInteger(app, "--rendezvous-job-keys", &o.rendezvous.job_keys, 1, kInt,
             "rendezvous keys one job may hold (default 16384)")
      ->group(kLimits);
  AddSize(app, "--rendezvous-total-bytes", &o.rendezvous.total_bytes, kInt64,
          "rendezvous keys + values all jobs together may hold (default 1GiB)")
      ->group(kLimits);
  AddInteger(app, "--max-workers", &o.workers.max_workers, 1, kInt,
             "a new worker is refused while N are live (default 10000)")
      ->group(kLimits);
  AddInteger(app, "--max-dead-workers", &o.workers.max_dead_workers, 0, kInt,
             "dead workers remembered for `zpipe workers --all`, the longest dead forgotten first "
             "(default 1000)")
      ->group(kLimits);
  AddDuration(app, "--dead-worker-retention", &o.workers.dead_retention,
              "how long a dead worker stays listed (default 15m)")
      ->group(kLimits);
  AddDuration(app, "--retain-finished", &o.retain_finished,
              "delete finished jobs this long after they ended, with their history, trace and "
              "logs (default 0 = keep forever)")
      ->group(kLimits);
  AddInteger(app, "--retain-count", &o.retain_count, 0, kInt,
             "keep only the N jobs that finished last; older finished jobs are deleted (default "
             "0 = unlimited)")
      ->group(kLimits);
  AddInteger(app, "--log-lines", &o.log_lines, 1, kInt,
             "newest worker log lines kept per rank of a job, in memory (`zpipe logs`; default "
             "1000; for the last 200 jobs)")
      ->group(kLimits);
  AddSize(app, "--artifact-max-job-bytes", &o.artifacts.max_job_bytes, kInt64,
          "uploaded artifacts one job may name, together (default 2GiB)")
      ->group(kLimits);
}

// Serves until SIGINT or SIGTERM; SIGHUP reloads the token files.
int Serve(const ServerOptions& options) {
  // Signals are taken synchronously by the main thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = zpipe::coordinator::CoordinatorServer::Start(options);
  if (!server.ok()) {
    zpipe::LogError("cannot start: ", server.status().ToString());
    // INVALID_ARGUMENT: a flag's value or the file it names is unusable (a TLS key that does not
    // match its certificate, a malformed token file): like a bad flag, exit 2.
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    (void)(*server)->ReloadTokens();  // logs the outcome; a bad file keeps the old tokens
  }
  zpipe::LogInfo("received signal ", sig);
  // Under 1 s in all (docs/operations.md "Failures and recovery"): every acknowledged change is
  // already stored, so a call cut off here was never acknowledged and its client retries it;
  // sessions and watches would only ever end at the deadline.
  (*server)->Shutdown(zpipe::coordinator::kShutdownGrace);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ServerOptions options;
  std::unique_ptr<CLI::App> app = zpipe::flags::NewApp(
      "zpipe-coordinator", "zpipe-coordinator [flags]",
      "  the ZeroPipe control plane: jobs, plans and workers over gRPC; /metrics, the live page\n"
      "  and /api over HTTP");
  AddServiceFlags(*app, options);
  AddLimitFlags(*app, options);
  app->footer(kExitStatus);
  if (std::optional<int> exit =
          zpipe::flags::ParseMain(*app, zpipe::flags::Args(argc, argv), std::cout, std::cerr)) {
    return *exit;
  }
  return Serve(options);
}
