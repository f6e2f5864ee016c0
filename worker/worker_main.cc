// zpipe-worker: registers with the coordinator and runs the job ranks it is assigned.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <torch/csrc/jit/runtime/print_handler.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "flags/flags.h"
#include "util/log.h"
#include "worker/daemon/model_export.h"
#include "worker/daemon/worker_daemon.h"

namespace {

using zpipe::util::NamedFile;
using zpipe::worker::DaemonOptions;

// print() in a TorchScript model: into the worker's log, one line per line printed, so it shows
// in `zpipe logs` while the job runs (LibTorch's default writes to std::cout, which no one reads).
void ModelPrint(const std::string& text) {
  absl::string_view s = text;
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    zpipe::Log(absl::StrCat("model: ", line));
  }
}

// What the command line (and the environment under it) says, before it becomes DaemonOptions.
struct WorkerFlags {
  DaemonOptions options;
  std::string device = "cpu";
  std::string transport = "tcp";
  std::string metrics_listen;
  std::string health_listen;
  std::string token_file;
  // TLS files and where each came from: a flag wins over its environment variable.
  NamedFile tls_ca{"--tls-ca", ""};
  NamedFile tls_cert{"--tls-cert", ""};
  NamedFile tls_key{"--tls-key", ""};
  int threads = 1;
  bool require_tls = false;
};

// The environment's defaults: ZPIPE_COORDINATOR, ZPIPE_TOKEN, ZPIPE_TRANSPORT, ZPIPE_TLS_CA,
// ZPIPE_TLS_CERT, ZPIPE_TLS_KEY and ZPIPE_REQUIRE_TLS=1. Flags parsed after this override them.
void ApplyEnvironment(WorkerFlags& f) {
  if (const char* env = std::getenv("ZPIPE_COORDINATOR")) f.options.coordinator = env;
  if (const char* env = std::getenv("ZPIPE_TOKEN")) {
    f.options.token = std::string(absl::StripAsciiWhitespace(env));
  }
  if (const char* env = std::getenv("ZPIPE_TRANSPORT"); env != nullptr && *env != '\0') {
    f.transport = env;
  }
  for (auto [file, env_name] :
       {std::pair{&f.tls_ca, "ZPIPE_TLS_CA"}, std::pair{&f.tls_cert, "ZPIPE_TLS_CERT"},
        std::pair{&f.tls_key, "ZPIPE_TLS_KEY"}}) {
    const char* env = std::getenv(env_name);
    if (env != nullptr && *env != '\0') *file = {env_name, env};
  }
  const char* require_env = std::getenv("ZPIPE_REQUIRE_TLS");
  f.require_tls = require_env != nullptr && std::string(require_env) == "1";
}

// Which coordinator, and how to trust it and be trusted by it.
void AddConnectionFlags(CLI::App& app, WorkerFlags& f) {
  using zpipe::flags::AddText;
  AddText(app, "--coordinator", &f.options.coordinator, "ADDR",
          "coordinator gRPC address (default $ZPIPE_COORDINATOR or localhost:50051)");
  AddText(app, "--token-file", &f.token_file, "FILE",
          "the worker token the coordinator requires (the first line of FILE that is not blank "
          "or #; default $ZPIPE_TOKEN)");
  zpipe::flags::AddSwitch(app, "--require-tls", &f.require_tls,
                          "refuse to send the token to another machine without TLS (also "
                          "ZPIPE_REQUIRE_TLS=1); without it, a warning");
  struct TlsFlag {
    const char* name;
    NamedFile* file;
    const char* help;
  };
  for (const TlsFlag& t :
       {TlsFlag{"--tls-ca", &f.tls_ca,
                "talk TLS to the coordinator, verifying it with this PEM CA (default "
                "$ZPIPE_TLS_CA; without either, plaintext)"},
        TlsFlag{"--tls-cert", &f.tls_cert,
                "with --tls-key: this PEM client certificate, for a coordinator with "
                "--tls-client-ca (default $ZPIPE_TLS_CERT)"},
        TlsFlag{"--tls-key", &f.tls_key, "the key of --tls-cert (default $ZPIPE_TLS_KEY)"}}) {
    zpipe::flags::AddValue(app, t.name, "FILE", t.help, [t](const std::string& v) {
      *t.file = {t.name, v};
    });
  }
}

// What this worker is and what its jobs may use.
void AddWorkerFlags(CLI::App& app, WorkerFlags& f) {
  using zpipe::flags::AddText;
  AddText(app, "--name", &f.options.name, "NAME", "stable worker name (default HOST/DEVICE)");
  AddText(app, "--device", &f.device, "cpu|cpu:N|cuda:N",
          "cpu (default), cpu:N for the N-th CPU process on a host, or cuda:N");
  zpipe::flags::AddInteger(app, "--threads", &f.threads, 1, std::numeric_limits<int>::max(),
                           "intra-op threads for LibTorch (default 1)");
  AddText(app, "--host", &f.options.host, "ADDR",
          "address peers reach this worker on (default 127.0.0.1)");
  zpipe::flags::AddDuration(app, "--comm-timeout", &f.options.comm_timeout,
                            "how long without progress before a peer counts as gone: seconds "
                            "(60) or a duration (1m; default 60)");
  AddText(app, "--transport", &f.transport, "tcp",
          "what carries a CPU job's activations, gradients and all-reduces: tcp, ZeroPipe's own "
          "streams (the only one; gloo was removed when LibTorch moved to the PyTorch wheel; "
          "default $ZPIPE_TRANSPORT or tcp)");
  zpipe::flags::AddList(app, "--data-root", &f.options.data_roots, "DIR",
                        "jobs may name model, data and checkpoint paths only under DIR (after "
                        "resolving symlinks and ..); repeatable (default: the working directory "
                        "only)");
  AddText(app, "--artifact-cache", &f.options.artifact_cache, "DIR",
          "where artifacts uploaded with `zpipe submit --upload` are kept, verified by SHA-256 "
          "and reused (default: .zpipe-artifacts under the first --data-root)");
  zpipe::flags::AddInteger(app, "--log-lines", &f.options.log_lines, 1, 1000000,
                           "a running rank's newest log lines kept for the coordinator while it "
                           "cannot be reached (`zpipe logs`; default 1000)");
  zpipe::flags::AddDuration(app, "--reconnect-max-backoff", &f.options.reconnect_max_backoff,
                            "longest wait between attempts to reach the coordinator, e.g. 2s, "
                            "500ms (default 2s); running jobs go on meanwhile",
                            absl::Milliseconds(10), absl::Minutes(10));
  AddText(app, "--metrics-listen", &f.metrics_listen, "HOST:PORT",
          "serve Prometheus /metrics there (default: off)");
  AddText(app, "--health-listen", &f.health_listen, "HOST:PORT",
          "serve grpc.health.v1 there, for probes (default: off)");
}

constexpr char kUsage[] =
    "zpipe-worker --coordinator ADDR [--name NAME] [--device cpu|cpu:N|cuda:N]\n"
    "                    [--threads N] [--host ADDR] [--comm-timeout D] [--transport tcp]";

// A flag's value that the parse let through but the worker cannot use: exit 2, as a bad flag.
int Usage(const std::string& error) {
  std::fprintf(stderr, "zpipe-worker: %s\nusage: %s\nRun 'zpipe-worker --help' for its flags.\n",
               error.c_str(), kUsage);
  return 2;
}

// `zpipe-worker export`: the trained model of a job from its checkpoints.
int Export(const std::vector<std::string>& argv) {
  std::string root, model, out;
  std::unique_ptr<CLI::App> app = zpipe::flags::NewApp(
      "zpipe-worker export", "zpipe-worker export --checkpoint DIR/NAME [--model FILE] -o FILE",
      "  Writes the trained model of the job whose checkpoints are under DIR/NAME (the latest\n"
      "  complete one): a TorchScript job's module with the trained weights (torch.jit.load), or\n"
      "  a GPT job's state dict (torch.load).");
  zpipe::flags::AddText(*app, "--checkpoint", &root, "DIR/NAME", "the job's checkpoints");
  zpipe::flags::AddText(*app, "--model", &model, "FILE",
                        "overrides the model file recorded in the checkpoint");
  zpipe::flags::AddText(*app, "-o,--out", &out, "FILE", "where the model goes");
  if (std::optional<int> exit = zpipe::flags::ParseMain(*app, argv, std::cout, std::cerr)) {
    return *exit;
  }
  if (root.empty() || out.empty()) {
    std::fprintf(stderr, "zpipe-worker export: --checkpoint and -o are required\n%s",
                 zpipe::flags::UsageLine(*app).c_str());
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

// --transport: tcp only; gloo is gone and says why.
std::optional<int> CheckTransport(const std::string& transport) {
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
  return std::nullopt;
}

// The token (--token-file over $ZPIPE_TOKEN), TLS, and the plaintext-token check.
std::optional<int> ResolveCredentials(WorkerFlags& f) {
  if (!f.token_file.empty()) {
    absl::StatusOr<std::string> token = zpipe::flags::ReadTokenFile(f.token_file);
    if (!token.ok()) return Usage("--token-file: cannot read " + f.token_file);
    if (token->empty()) return Usage("--token-file: " + f.token_file + " holds no token");
    f.options.token = *token;
  }
  auto tls = zpipe::util::LoadTlsClientPem(f.tls_ca, f.tls_cert, f.tls_key);
  if (!tls.ok()) {
    std::fprintf(stderr, "zpipe-worker: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  if (std::string problem = zpipe::util::PlaintextTokenProblem(
          "zpipe-worker", f.options.coordinator, !f.options.token.empty(), tls->has_value(),
          f.require_tls, "--tls-ca");
      !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    if (f.require_tls) return 2;
  }
  f.options.tls = *std::move(tls);
  return std::nullopt;
}

// --device as DaemonOptions (a CUDA device LibTorch cannot see is refused), and the default name
// HOST/DEVICE.
std::optional<int> ResolveDevice(WorkerFlags& f) {
  DaemonOptions& o = f.options;
  const std::string& device = f.device;
  if (device == "cpu") {
    o.device_kind = zpipe::v1::DEVICE_KIND_CPU;
  } else if (device.rfind("cpu:", 0) == 0 && absl::SimpleAtoi(device.substr(4), &o.device_index) &&
             o.device_index >= 0) {
    o.device_kind = zpipe::v1::DEVICE_KIND_CPU;
  } else if (device.rfind("cuda:", 0) == 0 && absl::SimpleAtoi(device.substr(5), &o.device_index) &&
             o.device_index >= 0) {
    o.device_kind = zpipe::v1::DEVICE_KIND_CUDA;
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "zpipe-worker: --device %s: this LibTorch build has no CUDA device\n",
                   device.c_str());
      return 2;
    }
  } else {
    return Usage("--device: expected cpu, cpu:N or cuda:N, got '" + device + "'");
  }
  if (o.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    o.name = absl::StrCat(host, "/", device == "cpu" ? "cpu0" : device);
    for (char& c : o.name) {
      if (c == ':') c = '-';
    }
  }
  return std::nullopt;
}

// The worker's own /metrics and grpc.health.v1 ports, when asked for.
struct Endpoints {
  std::unique_ptr<zpipe::worker::WorkerMetrics> metrics;
  std::unique_ptr<grpc::Server> health;
};

std::optional<int> StartEndpoints(WorkerFlags& f, Endpoints& endpoints) {
  if (!f.metrics_listen.empty()) {
    auto m = zpipe::worker::NewPrometheusWorkerMetrics(f.metrics_listen, f.options.name);
    if (!m.ok()) {
      std::fprintf(stderr, "zpipe-worker: %s\n", std::string(m.status().message()).c_str());
      return 2;
    }
    endpoints.metrics = *std::move(m);
    f.options.metrics = endpoints.metrics.get();
  }
  // grpc.health.v1 for Kubernetes probes: SERVING while the process runs.
  if (f.health_listen.empty()) return std::nullopt;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // gRPC serves its default health service only next to a synchronous service; this one
  // answers UNIMPLEMENTED to everything.
  static zpipe::v1::WorkerService::Service placeholder;
  builder.RegisterService(&placeholder);
  int bound = 0;
  builder.AddListeningPort(f.health_listen, grpc::InsecureServerCredentials(), &bound);
  endpoints.health = builder.BuildAndStart();
  if (endpoints.health == nullptr || bound == 0) {
    std::fprintf(stderr, "zpipe-worker: --health-listen %s: cannot listen\n",
                 f.health_listen.c_str());
    return 2;
  }
  endpoints.health->GetHealthCheckService()->SetServingStatus(true);
  return std::nullopt;
}

// Runs the daemon until it leaves: SIGTERM / SIGINT, taken by a watcher thread, become a clean
// Leave().
int RunDaemon(const DaemonOptions& options, Endpoints& endpoints) {
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
  if (endpoints.health != nullptr) endpoints.health->Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "zpipe-worker: %s\n", std::string(st.message()).c_str());
    return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;  // 2: a bad --data-root
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered stdout (stderr is unbuffered already): whatever a library writes there reaches
  // a log collector (systemd, kubectl logs, a pipe) as it happens, not when a 4 KB buffer fills.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The worker's own form of the shared log (util/log.h): "zpipe-worker: LINE", as written.
  zpipe::SetLogFormat({.prefix = "zpipe-worker: ", .timestamp = false, .sanitize = false});
  std::vector<std::string> args = zpipe::flags::Args(argc, argv);
  if (!args.empty() && args[0] == "export") return Export({args.begin() + 1, args.end()});
  WorkerFlags f;
  ApplyEnvironment(f);
  std::unique_ptr<CLI::App> app = zpipe::flags::NewApp(
      "zpipe-worker", kUsage,
      "  registers with the coordinator and runs the job ranks it is assigned;\n"
      "  `zpipe-worker export --help`: a job's trained model from its checkpoints");
  AddConnectionFlags(*app, f);
  AddWorkerFlags(*app, f);
  if (std::optional<int> exit = zpipe::flags::ParseMain(*app, args, std::cout, std::cerr)) {
    return *exit;
  }
  if (std::optional<int> exit = CheckTransport(f.transport)) return *exit;
  if (std::optional<int> exit = ResolveCredentials(f)) return *exit;
  if (std::optional<int> exit = ResolveDevice(f)) return *exit;
  f.options.memory_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  torch::set_num_threads(f.threads);
  Endpoints endpoints;
  if (std::optional<int> exit = StartEndpoints(f, endpoints)) return *exit;
  return RunDaemon(f.options, endpoints);
}
