// The coordinator's live page in a real browser: headless Chromium loads `/` while a real job
// runs on real zpipe-worker processes, and the page's DOM (dumped twice, a few seconds apart)
// shows the job, its executed timeline (sends and receives on their own tracks) beside the
// predicted one, and a newer iteration the second time. Also: /metrics and the JSON API on the
// same port.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/cli/subprocess.h"

namespace zpipe {
namespace {

using testing::Subprocess;

std::string Chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// The page's DOM after its scripts ran for a while (virtual time: fetches complete first).
std::string DumpDom(const std::string& url) {
  const std::string profile = absl::StrCat(::testing::TempDir(), "/chromium-", getpid());
  testing::ProcessResult r = testing::RunProcess(
      {Chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
       "--no-first-run", "--disable-background-networking", "--disable-component-update",
       "--disable-sync", "--disable-dev-shm-usage", absl::StrCat("--user-data-dir=", profile),
       "--virtual-time-budget=4000", "--dump-dom", url},
      {}, 45);
  testing::RunProcess({"rm", "-rf", profile});
  return r.out;
}

// A plain HTTP/1.0 GET on loopback; the whole response, headers included.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

int DataIteration(const std::string& dom) {
  std::smatch m;
  static const std::regex re("id=\"executed-timeline\" data-iteration=\"([0-9]+)\"");
  if (!std::regex_search(dom, m, re)) return -1;
  return std::stoi(m[1]);
}

TEST(LivePageTest, RunningJobsTimelineAppearsAndUpdatesInChromium) {
  if (Chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup installs it)";
  const std::string address = absl::StrCat("127.0.0.1:", testing::FreePort());
  const int http_port = testing::FreePort();
  Subprocess coordinator({ZPIPE_COORDINATOR_BIN, "--listen", address, "--metrics-listen",
                          absl::StrCat("127.0.0.1:", http_port), "--db",
                          ":memory:", "--heartbeat-timeout", "3s"});
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        ZPIPE_WORKER_BIN, "--coordinator", address, "--name", absl::StrCat("w", i), "--device",
        absl::StrCat("cpu:", i), "--comm-timeout", "10"}));
  }
  std::unique_ptr<Client> client = Client::Create(address);
  v1::JobSpec spec;
  spec.set_name("live-page");
  auto* syn = spec.mutable_model()->mutable_synthetic();
  syn->set_forward_ms(10);
  syn->set_backward_ms(10);
  syn->set_weight_ms(8);
  syn->set_activation_kb(8);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_schedule()->set_kind("zb-h1");
  spec.mutable_batch()->set_microbatches(4);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(100000);  // runs until cancelled
  spec.mutable_train()->set_lr(1e-3);
  // Both workers registered and idle (the coordinator is up).
  for (int i = 0; i < 300; ++i) {
    auto ws = client->Workers();
    int idle = 0;
    if (ws.ok()) {
      for (const auto& w : *ws) idle += w.state() == v1::WORKER_STATE_IDLE;
    }
    if (idle == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto submitted = client->Submit(spec, "live");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Wait until the job has a complete traced iteration.
  bool traced = false;
  for (int i = 0; i < 300 && !traced; ++i) {
    traced = client->Trace("live").ok();
    if (!traced) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(traced) << "no trace after 30 s";

  const std::string base = absl::StrCat("http://127.0.0.1:", http_port);
  const std::string metrics = HttpGet(http_port, "/metrics");
  EXPECT_NE(metrics.find("200 OK"), std::string::npos) << metrics.substr(0, 300);
  const std::string jobs = HttpGet(http_port, "/api/jobs");
  EXPECT_NE(jobs.find("\"id\":\"live\""), std::string::npos) << jobs.substr(0, 300);
  const std::string trace = HttpGet(http_port, "/api/jobs/live/trace");
  EXPECT_NE(trace.find("\"predicted\""), std::string::npos) << trace.substr(0, 300);
  EXPECT_NE(HttpGet(http_port, "/api/jobs/nope/trace").find("404"), std::string::npos);
  // The workers' log lines as text, both ranks (sent about once per heartbeat interval).
  std::string logs;
  for (int i = 0; i < 100; ++i) {
    logs = HttpGet(http_port, "/api/jobs/live/logs");
    if (logs.find("rank 0: ") != std::string::npos && logs.find("rank 1: ") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(logs.find("text/plain"), std::string::npos) << logs.substr(0, 300);
  EXPECT_NE(logs.find("rank 1: job live: rank 1/0 of p=2"), std::string::npos) << logs;
  EXPECT_NE(HttpGet(http_port, "/api/jobs/live/logs?rank=5").find("400"), std::string::npos);

  const std::string url = absl::StrCat(base, "/?job=live");
  const std::string first = DumpDom(url);
  ASSERT_NE(first.find("executed-timeline"), std::string::npos) << first.substr(0, 2000);
  EXPECT_NE(first.find("data-job=\"live\""), std::string::npos);
  EXPECT_NE(first.find(">running<"), std::string::npos);
  EXPECT_NE(first.find("href=\"/api/jobs/live/logs\""), std::string::npos)
      << "each job links its logs";
  const int it1 = DataIteration(first);
  ASSERT_GE(it1, 0) << "no executed timeline drawn:\n" << first.substr(0, 4000);
  // Both timelines have their actions drawn: 2 ranks x 4 microbatches x F/B/W executed.
  const size_t executed_at = first.find("id=\"executed-timeline\"");
  const size_t predicted_at = first.find("id=\"predicted-timeline\"");
  ASSERT_NE(predicted_at, std::string::npos);
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  const std::string executed_svg = first.substr(executed_at, predicted_at - executed_at);
  const std::string predicted_svg = first.substr(predicted_at);
  EXPECT_GE(count(executed_svg, "class=\"action\""), 24u);
  EXPECT_GE(count(predicted_svg, "class=\"action\""), 24u);
  // Executed sends and receives on their own tracks, like the predicted ones: 4 activations and
  // 4 gradients cross between the 2 ranks each iteration, each a send and a receive.
  EXPECT_EQ(count(executed_svg, "data-track=\"send\""), 8u);
  EXPECT_EQ(count(executed_svg, "data-track=\"recv\""), 8u);
  EXPECT_EQ(count(predicted_svg, "data-track=\"send\""), 8u);

  std::this_thread::sleep_for(std::chrono::seconds(3));
  const std::string second = DumpDom(url);
  const int it2 = DataIteration(second);
  std::printf("live page showed iteration %d, then %d\n", it1, it2);
  EXPECT_GT(it2, it1) << "the timeline did not update";

  EXPECT_TRUE(client->Cancel("live").ok());
}

}  // namespace
}  // namespace zpipe
