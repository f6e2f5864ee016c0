// Anonymous connection floods (issue 30): half-open HTTP requests (slowloris) and idle TCP
// connections on the HTTP port must not keep /healthz, /metrics or grpc.health.v1 (the port
// liveness probes use, --health-listen) from answering, and a request head that does not arrive
// in time is closed. Real coordinator, real sockets over loopback.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Opens `n` connections to `port`, each sending `prefix` (maybe nothing) and then holding.
std::vector<int> Flood(int port, int n, const std::string& prefix) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = Dial(port);
    if (fd < 0) continue;
    if (!prefix.empty()) (void)!send(fd, prefix.data(), prefix.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

// GET `path` with a deadline; the whole response, or "" on timeout or error.
std::string GetWithin(int port, const std::string& path, absl::Duration deadline) {
  const int fd = Dial(port);
  if (fd < 0) return "";
  const timeval tv = absl::ToTimeval(deadline);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  std::string out;
  const absl::Time end = absl::Now() + deadline;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    ssize_t n;
    while (absl::Now() < end && (n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  }
  close(fd);
  return absl::Now() <= end ? out : "";
}

// grpc.health.v1.Health/Check on `port` within `deadline`: true when SERVING.
bool HealthServing(int port, absl::Duration deadline) {
  grpc::GenericStub generic(Connect(port));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  grpc::CompletionQueue cq;
  grpc::Slice empty("");  // HealthCheckRequest{service: ""} encodes to no bytes
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  auto call = generic.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&response, &st, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  std::vector<grpc::Slice> slices;
  if (!st.ok() || !response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes == std::string("\x08\x01", 2);  // status: SERVING
}

coordinator::ServerOptions WithHealthPort() {
  coordinator::ServerOptions options;
  options.health_listen = "127.0.0.1:0";
  return options;
}

TEST(Flood, SlowlorisKeepsNeitherHealthNorPagesOut) {
  auto server = StartCoordinator(WithHealthPort());
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->health_port(), 0);
  // The outside probe's numbers: 226 half-open requests, each a request line and one header.
  std::vector<int> flood =
      Flood(server->metrics_port(), 226, "GET /healthz HTTP/1.1\r\nHost: zpipe\r\n");
  ASSERT_GT(flood.size(), 200u);
  absl::SleepFor(absl::Milliseconds(300));  // let the relay take them all in
  EXPECT_TRUE(HealthServing(server->health_port(), absl::Seconds(1)));
  EXPECT_TRUE(HealthServing(server->port(), absl::Seconds(1)));
  for (const char* path : {"/healthz", "/metrics"}) {
    const absl::Time start = absl::Now();
    const std::string reply = GetWithin(server->metrics_port(), path, absl::Seconds(2));
    EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << path << ": '" << reply << "'";
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << path;
  }
  CloseAll(flood);
}

TEST(Flood, IdleConnectionsOverTheCapsAreClosedFirst) {
  coordinator::ServerOptions options = WithHealthPort();
  options.http_limits.max_connections = 64;
  options.http_limits.max_per_address = 48;
  auto server = StartCoordinator(options);
  ASSERT_NE(server, nullptr);
  // 120 connections that send nothing: past both caps (all come from 127.0.0.1).
  std::vector<int> flood = Flood(server->metrics_port(), 120, "");
  absl::SleepFor(absl::Milliseconds(300));
  const std::string reply = GetWithin(server->metrics_port(), "/healthz", absl::Seconds(2));
  EXPECT_TRUE(absl::StrContains(reply, "\r\n\r\nok")) << "'" << reply << "'";
  EXPECT_TRUE(HealthServing(server->health_port(), absl::Seconds(1)));
  // The flood's oldest connections were the ones closed: the first reads EOF, the last does not.
  char byte;
  const timeval tv{0, 200000};
  setsockopt(flood.front(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(flood.back(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_EQ(recv(flood.front(), &byte, 1, 0), 0);
  EXPECT_EQ(recv(flood.back(), &byte, 1, 0), -1);  // still open, nothing to read
  CloseAll(flood);
}

TEST(Flood, RequestHeadMustArriveInTime) {
  coordinator::ServerOptions options;
  options.http_limits.header_timeout = absl::Milliseconds(400);
  auto server = StartCoordinator(options);
  ASSERT_NE(server, nullptr);
  std::vector<int> slow = Flood(server->metrics_port(), 1, "GET /healthz HTTP/1.1\r\n");
  ASSERT_EQ(slow.size(), 1u);
  const timeval tv{3, 0};
  setsockopt(slow[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const absl::Time start = absl::Now();
  char byte;
  EXPECT_EQ(recv(slow[0], &byte, 1, 0), 0);  // closed by the coordinator, no reply
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(2));
  CloseAll(slow);
}

}  // namespace
}  // namespace zpipe::testing
