// zpipe-coordinator: the ZeroPipe control plane. See coordinator/server.h and --help.
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/log.h"
#include "coordinator/server.h"

namespace {

constexpr char kUsage[] =
    "usage: zpipe-coordinator [flags]\n"
    "  --listen HOST:PORT           gRPC address (default 127.0.0.1:50051)\n"
    "  --metrics-listen HOST:PORT   HTTP: /metrics, the live page and /api, '' to disable "
    "(default 127.0.0.1:9464)\n"
    "  --db PATH                    SQLite job store, or :memory: (default "
    "zpipe-coordinator.db)\n"
    "  --heartbeat-timeout DURATION worker liveness timeout, e.g. 10s, 500ms (default 10s)\n"
    "  --client-tokens FILE         tokens of clients (submit, read, cancel their own jobs)\n"
    "  --admin-tokens FILE          tokens of admins (what clients may, and cancel any job)\n"
    "  --worker-tokens FILE         tokens of workers (register, report, rendezvous)\n"
    "                               one token per line, optionally NAME:TOKEN; reloaded on "
    "SIGHUP.\n"
    "                               Without any, every caller is trusted and only loopback\n"
    "                               addresses may be listened on\n"
    "  --insecure                   listen beyond loopback without token files anyway\n";

bool ParseDurationFlag(const std::string& text, absl::Duration* out) {
  double seconds;
  if (absl::SimpleAtod(text, &seconds)) {
    *out = absl::Seconds(seconds);
    return seconds > 0;
  }
  return absl::ParseDuration(text, out) && *out > absl::ZeroDuration();
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
    } else if (arg == "--db") {
      options.db = value;
    } else if (arg == "--client-tokens") {
      options.tokens.client = value;
    } else if (arg == "--admin-tokens") {
      options.tokens.admin = value;
    } else if (arg == "--worker-tokens") {
      options.tokens.worker = value;
    } else if (arg == "--heartbeat-timeout") {
      if (!ParseDurationFlag(value, &options.heartbeat_timeout)) {
        std::fprintf(stderr, "zpipe-coordinator: bad --heartbeat-timeout '%s'\n", value.c_str());
        return 2;
      }
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
    zpipe::coordinator::LogError("cannot start: ", server.status().ToString());
    return 1;
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    (void)(*server)->ReloadTokens();  // logs the outcome; a bad file keeps the old tokens
  }
  zpipe::coordinator::LogInfo("received signal ", sig);
  (*server)->Shutdown(absl::Seconds(2));
  return 0;
}
