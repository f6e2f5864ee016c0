// zpipe-coordinator: the ZeroPipe control plane. See coordinator/server.h and --help.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/server.h"
#include "util/log.h"

namespace {

constexpr char kUsage[] =
    "usage: zpipe-coordinator [flags]\n"
    "  --listen HOST:PORT           gRPC address (default 127.0.0.1:50051)\n"
    "  --metrics-listen HOST:PORT   HTTP: /metrics, the live page and /api, '' to disable "
    "(default 127.0.0.1:9464)\n"
    "  --health-listen HOST:PORT    serve grpc.health.v1 alone there, in plaintext, for probes\n"
    "                               (default: off; --listen serves it too)\n"
    "  --db PATH                    SQLite job store, or :memory: (default "
    "zpipe-coordinator.db)\n"
    "  --heartbeat-timeout DURATION worker liveness timeout, e.g. 10s, 500ms (default 10s)\n"
    "  --recovery-grace DURATION    after a restart, how long RUNNING jobs wait for their\n"
    "                               workers to reconnect (default 10s; workers are back\n"
    "                               within 1s of the coordinator's return)\n"
    "  --client-tokens FILE         tokens of clients (submit, read, cancel their own jobs)\n"
    "  --admin-tokens FILE          tokens of admins (what clients may, and cancel any job)\n"
    "  --worker-tokens FILE         tokens of workers (register, report, rendezvous)\n"
    "                               one token per line, optionally NAME:TOKEN; reloaded on "
    "SIGHUP.\n"
    "                               Without any, every caller is trusted and only loopback\n"
    "                               addresses may be listened on\n"
    "  --tls-cert FILE              serve gRPC and the HTTP port over TLS (HTTPS) with this PEM\n"
    "                               certificate chain ...\n"
    "  --tls-key FILE               ... and its PEM private key\n"
    "  --tls-client-ca FILE         also require client certificates signed by this PEM CA on\n"
    "                               both ports (mTLS; counts as authentication for --listen)\n"
    "  --insecure                   listen beyond loopback without token files or\n"
    "                               --tls-client-ca anyway\n"
    "  --artifact-dir DIR           where uploaded models and token files are kept\n"
    "                               (`zpipe submit --upload`; default: artifacts/ beside --db)\n"
    "  --artifact-retention DURATION  keep an artifact this long after the last job naming it\n"
    "                               ended, or after its upload (default 1h)\n"
    "limits (refusals are RESOURCE_EXHAUSTED naming the flag; SIZE is bytes, or with KiB, MiB,\n"
    "GiB):\n"
    "  --max-message-bytes SIZE     largest gRPC request accepted (default 16MiB)\n"
    "  --max-pending-jobs N         new jobs refused while N are PENDING (default 1000)\n"
    "  --max-pending-jobs-per-client N  ... or while N of the same client token are (default\n"
    "                               100; without token files only the limit above applies)\n"
    "  --rendezvous-job-bytes SIZE  rendezvous keys + values one job may hold (default 64MiB)\n"
    "  --rendezvous-job-keys N      rendezvous keys one job may hold (default 16384)\n"
    "  --rendezvous-total-bytes SIZE  rendezvous keys + values all jobs together may hold\n"
    "                               (default 1GiB)\n"
    "  --log-lines N                newest worker log lines kept per rank of a job, in memory\n"
    "                               (`zpipe logs`; default 1000; for the last 200 jobs)\n"
    "  --artifact-max-job-bytes SIZE  uploaded artifacts one job may name, together (default "
    "2GiB)\n"
    "exit status: 2 for a bad flag, or a file a flag names that is unusable (e.g. a --tls-key\n"
    "that does not belong to --tls-cert); 1 when it cannot start otherwise\n";

bool ParseDurationFlag(const std::string& text, absl::Duration* out) {
  double seconds;
  if (absl::SimpleAtod(text, &seconds)) {
    *out = absl::Seconds(seconds);
    return seconds > 0;
  }
  return absl::ParseDuration(text, out) && *out > absl::ZeroDuration();
}

// A positive size: bytes, or a number with a KiB / MiB / GiB suffix; at most `max`.
bool ParseSizeFlag(std::string text, int64_t max, int64_t* out) {
  static constexpr std::pair<const char*, int64_t> kUnits[] = {
      {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}};
  int64_t unit = 1;
  for (const auto& [suffix, bytes] : kUnits) {
    if (absl::EndsWith(text, suffix)) {
      text.resize(text.size() - 3);
      unit = bytes;
      break;
    }
  }
  int64_t n;
  if (!absl::SimpleAtoi(text, &n) || n <= 0 || n > max / unit) return false;
  *out = n * unit;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  zpipe::coordinator::ServerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--insecure") {
      options.insecure = true;
      continue;
    }
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (absl::StartsWith(arg, "--") && i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "zpipe-coordinator: %s needs a value\n%s", arg.c_str(), kUsage);
      return 2;
    }
    if (arg == "--listen") {
      options.listen = value;
    } else if (arg == "--metrics-listen") {
      options.metrics_listen = value;
    } else if (arg == "--health-listen") {
      options.health_listen = value;
    } else if (arg == "--db") {
      options.db = value;
    } else if (arg == "--client-tokens") {
      options.tokens.client = value;
    } else if (arg == "--admin-tokens") {
      options.tokens.admin = value;
    } else if (arg == "--worker-tokens") {
      options.tokens.worker = value;
    } else if (arg == "--tls-cert") {
      options.tls.cert = value;
    } else if (arg == "--tls-key") {
      options.tls.key = value;
    } else if (arg == "--tls-client-ca") {
      options.tls.client_ca = value;
    } else if (arg == "--heartbeat-timeout") {
      if (!ParseDurationFlag(value, &options.heartbeat_timeout)) {
        std::fprintf(stderr, "zpipe-coordinator: bad --heartbeat-timeout '%s'\n", value.c_str());
        return 2;
      }
    } else if (arg == "--recovery-grace") {
      if (!ParseDurationFlag(value, &options.recovery_grace)) {
        std::fprintf(stderr, "zpipe-coordinator: bad --recovery-grace '%s'\n", value.c_str());
        return 2;
      }
    } else if (arg == "--artifact-dir") {
      options.artifacts.dir = value;
    } else if (arg == "--artifact-retention") {
      if (!ParseDurationFlag(value, &options.artifacts.retention)) {
        std::fprintf(stderr, "zpipe-coordinator: bad --artifact-retention '%s'\n", value.c_str());
        return 2;
      }
    } else if (arg == "--artifact-max-job-bytes") {
      int64_t n = 0;
      if (!ParseSizeFlag(value, std::numeric_limits<int64_t>::max(), &n)) {
        std::fprintf(stderr,
                     "zpipe-coordinator: bad --artifact-max-job-bytes '%s': want a positive size "
                     "(e.g. 2GiB)\n",
                     value.c_str());
        return 2;
      }
      options.artifacts.max_job_bytes = static_cast<uint64_t>(n);
    } else if (arg == "--max-message-bytes" || arg == "--max-pending-jobs" ||
               arg == "--max-pending-jobs-per-client" ||
               arg == "--rendezvous-job-bytes" || arg == "--rendezvous-job-keys" ||
               arg == "--rendezvous-total-bytes" ||
               arg == "--log-lines") {
      // Sizes take a unit suffix, counts do not; all but the rendezvous total fit gRPC's int.
      const bool is_size = absl::EndsWith(arg, "-bytes");
      int64_t n = 0;
      const bool ok =
          is_size ? ParseSizeFlag(value,
                                  arg == "--rendezvous-total-bytes"
                                      ? std::numeric_limits<int64_t>::max()
                                      : int64_t{std::numeric_limits<int>::max()},
                                  &n)
                  : absl::SimpleAtoi(value, &n) && n > 0 && n <= std::numeric_limits<int>::max();
      if (!ok) {
        std::fprintf(stderr, "zpipe-coordinator: bad %s '%s': want a positive %s\n", arg.c_str(),
                     value.c_str(), is_size ? "size (e.g. 16MiB)" : "count");
        return 2;
      }
      if (arg == "--max-message-bytes") options.max_message_bytes = static_cast<int>(n);
      if (arg == "--max-pending-jobs") options.max_pending_jobs = static_cast<int>(n);
      if (arg == "--max-pending-jobs-per-client") {
        options.max_pending_jobs_per_client = static_cast<int>(n);
      }
      if (arg == "--rendezvous-job-bytes") options.rendezvous.job_bytes = static_cast<size_t>(n);
      if (arg == "--rendezvous-job-keys") options.rendezvous.job_keys = static_cast<size_t>(n);
      if (arg == "--rendezvous-total-bytes") {
        options.rendezvous.total_bytes = static_cast<size_t>(n);
      }
      if (arg == "--log-lines") options.log_lines = static_cast<size_t>(n);
    } else {
      std::fprintf(stderr, "zpipe-coordinator: unknown flag %s\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }

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
  // Under 1 s in all (README "Reliability"): every acknowledged change is already stored, so a
  // call cut off here was never acknowledged and its client retries it; sessions and watches
  // would only ever end at the deadline.
  (*server)->Shutdown(zpipe::coordinator::kShutdownGrace);
  return 0;
}
