// TLS end to end with real processes and throwaway certificates (make-certs.sh, the openssl
// command): a zpipe-coordinator serving gRPC and HTTPS with --tls-cert/--tls-key; the zpipe CLI
// verifying it with --tls-ca or $ZPIPE_TLS_CA, and failing in one line (exit 1) when it does not
// trust it; mTLS (--tls-client-ca) refusing a zpipe-worker without a client certificate and
// running a job on one with it; HTTPS /metrics over TLS while plain HTTP gets no answer; start-up
// errors that name the flag and the file; the loopback rule with TLS.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"
#include "util/tls_files.h"

namespace zpipe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = R"(name: tls
model:
  synthetic: {forward_ms: 1, backward_ms: 1, weight_ms: 1, activation_kb: 1, params_mb: 1}
parallel: {pipeline: 1, data: 1}
schedule: {kind: 1f1b, memory_limit: auto}
batch: {microbatches: 2, microbatch_size: 1}
train: {iterations: 3, optimizer: sgd, lr: 0.1, seed: 1}
)";

// Certificates made once for the whole binary.
class Certs : public ::testing::Environment {
 public:
  static std::string dir;
  void SetUp() override {
    dir = absl::StrCat(::testing::TempDir(), "zpipe_tls_", getpid());
    ProcessResult made = RunProcess({"/bin/bash", ZPIPE_TLS_MAKE_CERTS, dir}, {}, 120);
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  void TearDown() override { std::system(("rm -rf " + dir).c_str()); }
};
std::string Certs::dir;

std::string Cert(const std::string& name) { return Certs::dir + "/" + name; }

// The curl binary ("" when there is none): Subprocess does not search $PATH.
std::string Curl() {
  ProcessResult found = RunProcess({"/bin/sh", "-c", "command -v curl"});
  std::string path = found.out;
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return found.exit_code == 0 ? path : "";
}

int NonEmptyLines(const std::string& text) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += !line.empty();
  return n;
}

// A zpipe-coordinator process with TLS on both ports (plus `extra` flags).
struct Coordinator {
  explicit Coordinator(std::vector<std::string> extra = {}) {
    address = absl::StrCat("127.0.0.1:", FreePort());
    http_port = FreePort();
    std::vector<std::string> argv = {ZPIPE_COORDINATOR_BIN,
                                     "--listen",
                                     address,
                                     "--metrics-listen",
                                     absl::StrCat("127.0.0.1:", http_port),
                                     "--db",
                                     ":memory:",
                                     "--heartbeat-timeout",
                                     "3s",
                                     "--tls-cert",
                                     Cert("server.crt"),
                                     "--tls-key",
                                     Cert("server.key")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<Subprocess>(argv);
  }
  bool WaitServing() {
    for (int i = 0; i < 600 && process->Running(); ++i) {
      if (process->ReadErr().find("serving on port") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  ~Coordinator() {
    process->Signal(SIGTERM);
    process->Wait(20);
  }
  std::string address;
  int http_port = 0;
  std::unique_ptr<Subprocess> process;
};

ProcessResult Zpipe(const Coordinator& c, std::vector<std::string> args,
                    std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), {ZPIPE_CLI_BIN, "--coordinator", c.address});
  for (const char* name : {"ZPIPE_TLS_CA", "ZPIPE_TLS_CERT", "ZPIPE_TLS_KEY", "ZPIPE_TOKEN"}) {
    if (!env.contains(name)) env[name] = "";  // unset
  }
  return RunProcess(args, env);
}

std::string WriteJob() {
  const std::string path = Certs::dir + "/job.yaml";
  std::ofstream(path) << kJob;
  return path;
}

// A plaintext HTTP/1.0 GET: what came back (empty when the server answered nothing).
std::string PlainHttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

TEST(TlsTest, CliWithTheCaSubmitsAndLists) {
  Coordinator c;
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  const std::string job = WriteJob();
  ProcessResult submit = Zpipe(c, {"--tls-ca", Cert("ca.crt"), "submit", job, "--id", "t1"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  // $ZPIPE_TLS_CA works too, and --tls-ca wins over it.
  ProcessResult list = Zpipe(c, {"list"}, {{"ZPIPE_TLS_CA", Cert("ca.crt")}});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("t1"));
  ProcessResult flag_wins =
      Zpipe(c, {"--tls-ca", Cert("ca.crt"), "list"}, {{"ZPIPE_TLS_CA", Cert("other-ca.crt")}});
  EXPECT_EQ(flag_wins.exit_code, 0) << flag_wins.err;
  // The host name in the certificate works as well as its IP address.
  ProcessResult by_name =
      RunProcess({ZPIPE_CLI_BIN, "--coordinator", absl::StrCat("localhost:", c.address.substr(10)),
                  "--tls-ca", Cert("ca.crt"), "list"},
                 {{"ZPIPE_TLS_CA", ""}});
  EXPECT_EQ(by_name.exit_code, 0) << by_name.err;
}

TEST(TlsTest, CliThatDoesNotTrustTheCoordinatorFailsInOneLine) {
  Coordinator c;
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  ProcessResult plaintext = Zpipe(c, {"list"});
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.err;
  EXPECT_EQ(NonEmptyLines(plaintext.err), 1) << plaintext.err;
  EXPECT_THAT(plaintext.err, HasSubstr("give --tls-ca FILE or set ZPIPE_TLS_CA"));

  ProcessResult other = Zpipe(c, {"--tls-ca", Cert("other-ca.crt"), "list"});
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_EQ(NonEmptyLines(other.err), 1) << other.err;
  EXPECT_THAT(other.err, HasSubstr("certificate verify failed"));
  EXPECT_THAT(other.err, HasSubstr("--tls-ca " + Cert("other-ca.crt")));

  ProcessResult missing = Zpipe(c, {"list"}, {{"ZPIPE_TLS_CA", Certs::dir + "/nope.crt"}});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("ZPIPE_TLS_CA " + Certs::dir + "/nope.crt: cannot read"));
  ProcessResult half =
      Zpipe(c, {"--tls-ca", Cert("ca.crt"), "--tls-cert", Cert("client.crt"), "list"});
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_THAT(half.err, HasSubstr("needs --tls-key"));
}

TEST(TlsTest, HttpsServesMetricsAndPlainHttpGetsNoAnswer) {
  Coordinator c;
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  const std::string curl = Curl();
  if (curl.empty()) GTEST_SKIP() << "no curl (scripts/setup installs it)";
  const std::string url = absl::StrCat("https://127.0.0.1:", c.http_port);
  ProcessResult metrics =
      RunProcess({curl, "-sS", "--max-time", "10", "--cacert", Cert("ca.crt"), url + "/metrics"});
  EXPECT_EQ(metrics.exit_code, 0) << metrics.err;
  EXPECT_THAT(metrics.out, HasSubstr("zpipe_jobs"));
  ProcessResult health = RunProcess({curl, "-sS", "--max-time", "10", "--cacert", Cert("ca.crt"),
                                     absl::StrCat("https://localhost:", c.http_port, "/healthz")});
  EXPECT_EQ(health.out, "ok\n") << health.err;
  // Without the CA curl refuses the certificate; plain HTTP is not answered at all.
  EXPECT_NE(RunProcess({curl, "-sS", "--max-time", "10", url + "/metrics"}).exit_code, 0);
  EXPECT_EQ(PlainHttpGet(c.http_port, "/metrics"), "");
  // The coordinator is still there after those.
  ProcessResult again =
      RunProcess({curl, "-sS", "--max-time", "10", "--cacert", Cert("ca.crt"), url + "/healthz"});
  EXPECT_EQ(again.out, "ok\n") << again.err;
}

TEST(TlsTest, MutualTlsRefusesAWorkerWithoutACertificateAndRunsAJobWithOne) {
  Coordinator c({"--tls-client-ca", Cert("ca.crt")});
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  EXPECT_THAT(c.process->ReadErr(), HasSubstr("client certificates signed by"));
  ClientOptions options;
  options.tls = util::TlsClientPem{};
  auto pem =
      util::LoadTlsClientPem({"--tls-ca", Cert("ca.crt")}, {"--tls-cert", Cert("client.crt")},
                             {"--tls-key", Cert("client.key")});
  ASSERT_TRUE(pem.ok()) << pem.status();
  options.tls = **pem;
  std::unique_ptr<Client> client = Client::Create(c.address, options);
  auto workers = [&] {
    auto w = client->Workers();
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? w->size() : size_t{0};
  };

  // A worker that trusts the coordinator but has no certificate of its own is refused.
  Subprocess bare({ZPIPE_WORKER_BIN, "--coordinator", c.address, "--name", "bare", "--tls-ca",
                   Cert("ca.crt"), "--comm-timeout", "5"},
                  {{"ZPIPE_TLS_CERT", ""}, {"ZPIPE_TLS_KEY", ""}});
  bool logged = false;
  for (int i = 0; i < 200 && !logged; ++i) {
    logged = bare.ReadErr().find("reconnecting") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(logged) << bare.ReadErr();
  EXPECT_THAT(bare.ReadErr(), HasSubstr("--tls-cert and --tls-key"));
  EXPECT_EQ(workers(), 0u);
  bare.Signal(SIGTERM);
  bare.Wait(20);

  // The CLI without a client certificate fails in one line too.
  ProcessResult cli = Zpipe(c, {"--tls-ca", Cert("ca.crt"), "workers"});
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_EQ(NonEmptyLines(cli.err), 1) << cli.err;
  EXPECT_THAT(cli.err, HasSubstr("--tls-cert"));

  // With the certificate (from the environment here) it registers and runs a job.
  Subprocess worker(
      {ZPIPE_WORKER_BIN, "--coordinator", c.address, "--name", "w0", "--tls-ca", Cert("ca.crt"),
       "--comm-timeout", "10"},
      {{"ZPIPE_TLS_CERT", Cert("client.crt")}, {"ZPIPE_TLS_KEY", Cert("client.key")}});
  bool idle = false;
  for (int i = 0; i < 300 && !idle; ++i) {
    auto w = client->Workers();
    idle = w.ok() && w->size() == 1 && (*w)[0].state() == v1::WORKER_STATE_IDLE;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(idle) << worker.ReadErr();
  ProcessResult submit =
      Zpipe(c, {"--tls-ca", Cert("ca.crt"), "--tls-cert", Cert("client.crt"), "--tls-key",
                Cert("client.key"), "submit", WriteJob(), "--id", "mtls", "--wait"});
  EXPECT_EQ(submit.exit_code, 0) << submit.out << submit.err;
  auto job = client->Get("mtls");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->reason();
  EXPECT_EQ(job->progress().iterations_done(), 3);

  // The HTTPS port wants the client certificate as well.
  if (const std::string curl = Curl(); !curl.empty()) {
    const std::string url = absl::StrCat("https://127.0.0.1:", c.http_port, "/healthz");
    EXPECT_NE(RunProcess({curl, "-sS", "--max-time", "10", "--cacert", Cert("ca.crt"), url}).out,
              "ok\n");
    EXPECT_EQ(RunProcess({curl, "-sS", "--max-time", "10", "--cacert", Cert("ca.crt"), "--cert",
                          Cert("client.crt"), "--key", Cert("client.key"), url})
                  .out,
              "ok\n");
  }
  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(30).exit_code, 0);
}

// A coordinator run with these TLS flags, which must refuse to start.
ProcessResult StartWithTls(std::vector<std::string> tls_flags) {
  std::vector<std::string> args = {ZPIPE_COORDINATOR_BIN, "--listen",  "127.0.0.1:0",
                                   "--metrics-listen",    "",          "--db",
                                   ":memory:"};
  args.insert(args.end(), tls_flags.begin(), tls_flags.end());
  return RunProcess(args, {}, 30);
}

TEST(TlsTest, StartupErrorsNameTheFlagAndTheFile) {
  const std::string missing = Certs::dir + "/missing.pem";
  ProcessResult no_cert = StartWithTls({"--tls-cert", missing, "--tls-key", Cert("server.key")});
  EXPECT_EQ(no_cert.exit_code, 2);
  EXPECT_THAT(no_cert.err, HasSubstr("--tls-cert " + missing + ": cannot read"));
  ProcessResult no_key = StartWithTls({"--tls-cert", Cert("server.crt")});
  EXPECT_EQ(no_key.exit_code, 2);
  EXPECT_THAT(no_key.err, HasSubstr("--tls-key is missing"));
  ProcessResult worker =
      RunProcess({ZPIPE_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--tls-ca", missing},
                 {{"ZPIPE_TLS_CA", ""}}, 30);
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_THAT(worker.err, HasSubstr("--tls-ca " + missing + ": cannot read"));
}

// A key that is not the certificate's fails the start naming both files, whether it is another
// RSA key (the client's, the CA's) or a key of another type; never later, in gRPC, as an
// unrelated error.
TEST(TlsTest, KeyOfAnotherCertificateExitsTwoNamingBothFlags) {
  for (const std::string& key : {Cert("client.key"), Cert("ca.key"), Cert("ec.key")}) {
    ProcessResult r = StartWithTls({"--tls-cert", Cert("server.crt"), "--tls-key", key});
    EXPECT_EQ(r.exit_code, 2) << key << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--tls-key " + key +
                                 ": the key does not belong to the certificate --tls-cert " +
                                 Cert("server.crt")));
    EXPECT_THAT(r.err, Not(HasSubstr("address list")));
  }
}

TEST(TlsTest, BeyondLoopbackTlsAloneStillNeedsTokensOrClientCertificates) {
  coordinator::ServerOptions options;
  options.listen = "0.0.0.0:0";
  options.metrics_listen = "";
  options.db = ":memory:";
  options.tls.cert = Cert("server.crt");
  options.tls.key = Cert("server.key");
  auto refused = coordinator::CoordinatorServer::Start(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("TLS alone encrypts"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--tls-client-ca"));
  options.tls.client_ca = Cert("ca.crt");  // mTLS authenticates every caller
  options.metrics_listen = "0.0.0.0:0";
  auto served = coordinator::CoordinatorServer::Start(options);
  EXPECT_TRUE(served.ok()) << served.status();
}

}  // namespace
}  // namespace zpipe::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new zpipe::testing::Certs());
  return RUN_ALL_TESTS();
}
