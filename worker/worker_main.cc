// zpipe-worker: registers with the coordinator and runs the job ranks it is assigned.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <torch/csrc/jit/runtime/print_handler.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/log.h"
#include "worker/daemon/model_export.h"
#include "worker/daemon/worker_daemon.h"

namespace {

// print() in a TorchScript model: into the worker's log, one line per line printed, so it shows
// in `zpipe logs` while the job runs (LibTorch's default writes to std::cout, which no one reads).
void ModelPrint(const std::string& text) {
  absl::string_view s = text;
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    zpipe::Log(absl::StrCat("model: ", line));
  }
}

constexpr char kUsage[] =
    "usage: zpipe-worker --coordinator ADDR [--name NAME] [--device cpu|cpu:N|cuda:N]\n"
    "                    [--threads N] [--host ADDR] [--comm-timeout SECONDS] [--transport "
    "tcp]\n"
    "  --coordinator  coordinator gRPC address (default $ZPIPE_COORDINATOR or localhost:50051)\n"
    "  --name         stable worker name (default HOST/DEVICE)\n"
    "  --device       cpu (default), cpu:N for the N-th CPU process on a host, or cuda:N\n"
    "  --threads      intra-op threads for LibTorch (default 1)\n"
    "  --host         address peers reach this worker on (default 127.0.0.1)\n"
    "  --comm-timeout seconds without progress before a peer counts as gone (default 60)\n"
    "  --transport    what carries a CPU job's activations, gradients and all-reduces: tcp,\n"
    "                 ZeroPipe's own streams (the only one; gloo was removed when LibTorch\n"
    "                 moved to the PyTorch wheel)\n"
    "  --token-file FILE           the worker token the coordinator requires (the first line\n"
    "                              of FILE that is not blank or #; default $ZPIPE_TOKEN)\n"
    "  --require-tls               refuse to send the token to another machine without TLS\n"
    "                              (also ZPIPE_REQUIRE_TLS=1); without it, a warning\n"
    "  --tls-ca FILE               talk TLS to the coordinator, verifying it with this PEM CA\n"
    "                              (default $ZPIPE_TLS_CA; without either, plaintext)\n"
    "  --tls-cert FILE             with --tls-key: this PEM client certificate, for a\n"
    "  --tls-key FILE              coordinator with --tls-client-ca (default $ZPIPE_TLS_CERT,\n"
    "                              $ZPIPE_TLS_KEY)\n"
    "  --data-root DIR             jobs may name model, data and checkpoint paths only under\n"
    "                              DIR (after resolving symlinks and ..); repeatable (default:\n"
    "                              the working directory only)\n"
    "  --artifact-cache DIR        where artifacts uploaded with `zpipe submit --upload` are\n"
    "                              kept, verified by SHA-256 and reused (default:\n"
    "                              .zpipe-artifacts under the first --data-root)\n"
    "  --log-lines N               a running rank's newest log lines kept for the coordinator\n"
    "                              while it cannot be reached (`zpipe logs`; default 1000)\n"
    "  --reconnect-max-backoff D   longest wait between attempts to reach the coordinator,\n"
    "                              e.g. 2s, 500ms (default 2s); running jobs go on meanwhile\n"
    "  --metrics-listen HOST:PORT  serve Prometheus /metrics there (default: off)\n"
    "  --health-listen HOST:PORT   serve grpc.health.v1 there, for probes (default: off)\n";

constexpr char kExportUsage[] =
    "usage: zpipe-worker export --checkpoint DIR/NAME [--model FILE] -o FILE\n"
    "  Writes the trained model of the job whose checkpoints are under DIR/NAME (the latest\n"
    "  complete one): a TorchScript job's module with the trained weights (torch.jit.load), or\n"
    "  a GPT job's state dict (torch.load). --model overrides the model file recorded in the\n"
    "  checkpoint.\n";

int Export(int argc, char** argv) {
  std::string root, model, out;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kExportUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "zpipe-worker export: %s: missing value\n%s", flag.c_str(),
                   kExportUsage);
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--checkpoint") {
      root = value;
    } else if (flag == "--model") {
      model = value;
    } else if (flag == "-o" || flag == "--out") {
      out = value;
    } else {
      std::fprintf(stderr, "zpipe-worker export: unknown flag %s\n%s", flag.c_str(), kExportUsage);
      return 2;
    }
  }
  if (root.empty() || out.empty()) {
    std::fprintf(stderr, "zpipe-worker export: --checkpoint and -o are required\n%s", kExportUsage);
    return 2;
  }
  auto result = zpipe::worker::ExportTrainedModel(root, model, out);
  if (!result.ok()) {
    std::fprintf(stderr, "zpipe-worker export: %s\n",
                 std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("exported %s after iteration %d (%d parameters) to %s\n", result->kind.c_str(),
              result->iteration, result->parameters, out.c_str());
  return 0;
}

int Usage(const std::string& error) {
  std::fprintf(stderr, "zpipe-worker: %s\n%s", error.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered stdout (stderr is unbuffered already): whatever a library writes there reaches
  // a log collector (systemd, kubectl logs, a pipe) as it happens, not when a 4 KB buffer fills.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The worker's own form of the shared log (util/log.h): "zpipe-worker: LINE", as written.
  zpipe::SetLogFormat({.prefix = "zpipe-worker: ", .timestamp = false, .sanitize = false});
  if (argc >= 2 && std::string(argv[1]) == "export") return Export(argc, argv);
  zpipe::worker::DaemonOptions options;
  if (const char* env = std::getenv("ZPIPE_COORDINATOR")) options.coordinator = env;
  if (const char* env = std::getenv("ZPIPE_TOKEN")) {
    options.token = std::string(absl::StripAsciiWhitespace(env));
  }
  std::string device = "cpu";
  std::string transport = "tcp";
  if (const char* env = std::getenv("ZPIPE_TRANSPORT"); env != nullptr && *env != '\0')
    transport = env;
  std::string metrics_listen, health_listen;
  // TLS files: a flag wins over its environment variable.
  zpipe::util::NamedFile tls_ca{"--tls-ca", ""}, tls_cert{"--tls-cert", ""},
      tls_key{"--tls-key", ""};
  for (auto [file, env_name] :
       {std::pair{&tls_ca, "ZPIPE_TLS_CA"}, std::pair{&tls_cert, "ZPIPE_TLS_CERT"},
        std::pair{&tls_key, "ZPIPE_TLS_KEY"}}) {
    const char* env = std::getenv(env_name);
    if (env != nullptr && *env != '\0') *file = {env_name, env};
  }
  int threads = 1;
  const char* require_env = std::getenv("ZPIPE_REQUIRE_TLS");
  bool require_tls = require_env != nullptr && std::string(require_env) == "1";
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    const size_t eq = flag.find('=');
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--require-tls") {  // a switch: no value
      require_tls = true;
      continue;
    }
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Usage(flag + ": missing value");
    }
    if (flag == "--coordinator") {
      options.coordinator = value;
    } else if (flag == "--name") {
      options.name = value;
    } else if (flag == "--device") {
      device = value;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &threads) || threads < 1)
        return Usage("--threads: must be >= 1");
    } else if (flag == "--host") {
      options.host = value;
    } else if (flag == "--transport") {
      transport = value;
    } else if (flag == "--metrics-listen") {
      metrics_listen = value;
    } else if (flag == "--token-file") {
      std::ifstream in(value);
      if (!in) return Usage("--token-file: cannot read " + value);
      options.token.clear();
      for (std::string line; options.token.empty() && std::getline(in, line);) {
        absl::string_view t = absl::StripAsciiWhitespace(line);
        if (!t.empty() && t[0] != '#') options.token = std::string(t);
      }
      if (options.token.empty()) return Usage("--token-file: " + value + " holds no token");
    } else if (flag == "--tls-ca" || flag == "--tls-cert" || flag == "--tls-key") {
      zpipe::util::NamedFile& f = flag == "--tls-ca"     ? tls_ca
                                  : flag == "--tls-cert" ? tls_cert
                                                         : tls_key;
      f = {flag, value};
    } else if (flag == "--data-root") {
      options.data_roots.push_back(value);
    } else if (flag == "--artifact-cache") {
      options.artifact_cache = value;
    } else if (flag == "--log-lines") {
      int lines = 0;
      if (!absl::SimpleAtoi(value, &lines) || lines < 1 || lines > 1000000)
        return Usage("--log-lines: must be in [1, 1000000]");
      options.log_lines = static_cast<size_t>(lines);
    } else if (flag == "--health-listen") {
      health_listen = value;
    } else if (flag == "--reconnect-max-backoff") {
      absl::Duration d;
      double secs = 0;
      if (absl::SimpleAtod(value, &secs)) {
        d = absl::Seconds(secs);
      } else if (!absl::ParseDuration(value, &d)) {
        return Usage("--reconnect-max-backoff: not a duration (e.g. 2s, 500ms)");
      }
      if (d < absl::Milliseconds(10) || d > absl::Minutes(10)) {
        return Usage("--reconnect-max-backoff: must be 10ms..10m");
      }
      options.reconnect_max_backoff = d;
    } else if (flag == "--comm-timeout") {
      double secs = 0;
      if (!absl::SimpleAtod(value, &secs) || secs <= 0) return Usage("--comm-timeout: must be > 0");
      options.comm_timeout = absl::Seconds(secs);
    } else {
      return Usage("unknown flag " + flag);
    }
  }
  if (transport == "gloo") {
    return Usage(
        "--transport gloo (or $ZPIPE_TRANSPORT=gloo) is gone: LibTorch now comes from the PyTorch "
        "wheel, which ships no Gloo headers, and a second Gloo in the process is unsafe. Drop the "
        "flag: CPU jobs run on ZeroPipe's TCP streams (tcp); `scripts/bench peer` compares them "
        "with PyTorch over Gloo");
  }
  if (transport != "tcp") {
    return Usage("--transport (or $ZPIPE_TRANSPORT): tcp, not '" + transport + "'");
  }

  auto tls = zpipe::util::LoadTlsClientPem(tls_ca, tls_cert, tls_key);
  if (!tls.ok()) {
    std::fprintf(stderr, "zpipe-worker: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  if (std::string problem = zpipe::util::PlaintextTokenProblem(
          "zpipe-worker", options.coordinator, !options.token.empty(), tls->has_value(),
          require_tls, "--tls-ca");
      !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    if (require_tls) return 2;
  }
  options.tls = *std::move(tls);
  if (device == "cpu") {
    options.device_kind = zpipe::v1::DEVICE_KIND_CPU;
  } else if (device.rfind("cpu:", 0) == 0 &&
             absl::SimpleAtoi(device.substr(4), &options.device_index) &&
             options.device_index >= 0) {
    options.device_kind = zpipe::v1::DEVICE_KIND_CPU;
  } else if (device.rfind("cuda:", 0) == 0 &&
             absl::SimpleAtoi(device.substr(5), &options.device_index) &&
             options.device_index >= 0) {
    options.device_kind = zpipe::v1::DEVICE_KIND_CUDA;
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "zpipe-worker: --device %s: this LibTorch build has no CUDA device\n",
                   device.c_str());
      return 2;
    }
  } else {
    return Usage("--device: expected cpu, cpu:N or cuda:N, got '" + device + "'");
  }
  if (options.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    options.name = absl::StrCat(host, "/", device == "cpu" ? "cpu0" : device);
    for (char& c : options.name) {
      if (c == ':') c = '-';
    }
  }
  options.memory_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  torch::set_num_threads(threads);

  std::unique_ptr<zpipe::worker::WorkerMetrics> metrics;
  if (!metrics_listen.empty()) {
    auto m = zpipe::worker::NewPrometheusWorkerMetrics(metrics_listen, options.name);
    if (!m.ok()) {
      std::fprintf(stderr, "zpipe-worker: %s\n", std::string(m.status().message()).c_str());
      return 2;
    }
    metrics = *std::move(m);
    options.metrics = metrics.get();
  }
  // grpc.health.v1 for Kubernetes probes: SERVING while the process runs.
  std::unique_ptr<grpc::Server> health;
  if (!health_listen.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    // gRPC serves its default health service only next to a synchronous service; this one
    // answers UNIMPLEMENTED to everything.
    static zpipe::v1::WorkerService::Service placeholder;
    builder.RegisterService(&placeholder);
    int bound = 0;
    builder.AddListeningPort(health_listen, grpc::InsecureServerCredentials(), &bound);
    health = builder.BuildAndStart();
    if (health == nullptr || bound == 0) {
      std::fprintf(stderr, "zpipe-worker: --health-listen %s: cannot listen\n",
                   health_listen.c_str());
      return 2;
    }
    health->GetHealthCheckService()->SetServingStatus(true);
  }

  // SIGTERM / SIGINT: a watcher thread turns the signal into a clean Stop().
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  zpipe::worker::WorkerDaemon daemon(options);
  // What the daemon logs while it runs a job also goes to the coordinator (`zpipe logs`).
  zpipe::SetLogSink(&daemon.log_sink());
  torch::jit::setPrintHandler(&ModelPrint);
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "zpipe-worker: signal %d, stopping\n", sig);
    daemon.Leave(absl::StrCat("signal ", sig, " (", sig == SIGTERM ? "SIGTERM" : "SIGINT", ")"));
  });
  watcher.detach();
  absl::Status st = daemon.Run();
  zpipe::SetLogSink(nullptr);
  if (health != nullptr) health->Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "zpipe-worker: %s\n", std::string(st.message()).c_str());
    return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;  // 2: a bad --data-root
  }
  return 0;
}
