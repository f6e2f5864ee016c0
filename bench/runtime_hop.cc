#include "bench/runtime_hop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/machine_state.h"
#include "core/plan.h"
#include "worker/comm/file_store.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/executor/executor.h"

extern char** environ;

namespace zpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSizesKb[] = {64, 256, 4096};
constexpr int kWarmupRounds = 20;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "runtime_bench hop: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& st, const std::string& what) {
  if (!st.ok()) Fail(absl::StrCat(what, ": ", st.ToString()));
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  Check(v.status(), what);
  return *std::move(v);
}

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Rounds scaled down for 4 MiB, so each size takes a similar time.
int RoundsFor(int kb, int rounds) { return kb >= 4096 ? std::max(20, rounds / 5) : rounds; }

// ---- plain TCP ------------------------------------------------------------------------------

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0) Fail("tcp write failed");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::read(fd, p, n);
    if (k <= 0) Fail("tcp read failed");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Rank 0 listens on an ephemeral loopback port and publishes it; rank 1 connects.
int ConnectTcp(int rank, worker::KeyValueStore& store) {
  const int one = 1;
  if (rank == 0) {
    const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(lfd, 1) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      Fail("tcp listen failed");
    }
    Check(store.Set("tcp-port", std::to_string(ntohs(addr.sin_port))), "publish port");
    const int fd = ::accept(lfd, nullptr, nullptr);
    ::close(lfd);
    if (fd < 0) Fail("tcp accept failed");
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
  }
  const std::vector<std::string> port =
      Must(store.Wait({"tcp-port"}, absl::Now() + absl::Seconds(60)), "wait for the tcp port");
  const int port_number = std::atoi(port[0].c_str());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port_number));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("tcp connect failed");
  }
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

std::vector<double> TcpRounds(int rank, int fd, size_t bytes, int rounds) {
  std::vector<char> out(bytes, 1), in(bytes);
  std::vector<double> rtt;
  rtt.reserve(rounds);
  for (int k = 0; k < kWarmupRounds + rounds; ++k) {
    const auto t0 = Clock::now();
    if (rank == 0) {
      WriteAll(fd, out.data(), bytes);
      ReadAll(fd, in.data(), bytes);
      if (k >= kWarmupRounds) rtt.push_back(Micros(Clock::now() - t0));
    } else {
      ReadAll(fd, in.data(), bytes);
      WriteAll(fd, out.data(), bytes);
    }
  }
  return rtt;
}

// ---- the communicator (TCP streams) ---------------------------------------------------------

std::vector<double> CommRounds(int rank, worker::Communicator& comm, size_t bytes, int rounds) {
  const int peer = 1 - rank;
  const int64_t floats = static_cast<int64_t>(bytes / 4);
  torch::Tensor out = torch::ones({floats}),
                in[2] = {torch::empty({floats}), torch::empty({floats})};
  std::vector<double> rtt;
  rtt.reserve(rounds);
  const int total = kWarmupRounds + rounds;
  std::unique_ptr<worker::CommHandle> recv = comm.Recv(in[0], peer, 0), next;
  for (int k = 0; k < total; ++k) {
    const auto t0 = Clock::now();
    if (rank == 0) {
      auto s = comm.Send(out, peer, k % 1000);
      Check(recv->Wait(), "comm recv");
      if (k + 1 < total) recv = comm.Recv(in[(k + 1) % 2], peer, (k + 1) % 1000);
      Check(s->Wait(), "comm send");
      if (k >= kWarmupRounds) rtt.push_back(Micros(Clock::now() - t0));
    } else {
      Check(recv->Wait(), "comm recv");
      if (k + 1 < total) next = comm.Recv(in[(k + 1) % 2], peer, (k + 1) % 1000);
      auto s = comm.Send(out, peer, k % 1000);
      Check(s->Wait(), "comm send");
      recv = std::move(next);
    }
  }
  return rtt;
}

// ---- Executor -------------------------------------------------------------------------------

// A stage that computes nothing: F and B hand back preallocated tensors of the activation size.
class EchoStage final : public worker::model::Stage {
 public:
  EchoStage(int stage, int64_t floats) : stage_(stage), out_(torch::ones({floats})) {}
  int stage() const override { return stage_; }
  int num_stages() const override { return 2; }
  absl::StatusOr<torch::Tensor> Forward(int mb, const torch::Tensor&,
                                        const torch::Tensor*) override {
    ++pending_;
    (void)mb;
    return out_;
  }
  absl::StatusOr<torch::Tensor> BackwardInput(int, const torch::Tensor&) override { return out_; }
  absl::Status BackwardWeight(int) override {
    --pending_;
    return absl::OkStatus();
  }
  absl::StatusOr<float> Loss(int) const override { return 0.0f; }
  void ClearLosses() override {}
  void FreeMicrobatch(int) override {}
  int pending_microbatches() const override { return pending_; }
  const std::vector<worker::model::ParamInfo>& params() const override { return params_; }
  worker::model::TensorSpec InputSpec(int) const override {
    return {{out_.numel()}, torch::kFloat32};
  }
  worker::model::TensorSpec OutputSpec(int) const override {
    return {{out_.numel()}, torch::kFloat32};
  }

 private:
  int stage_;
  torch::Tensor out_;
  int pending_ = 0;
  std::vector<worker::model::ParamInfo> params_;
};

// Keeps F s0's end and B s0's start per microbatch (rank 0).
class HopSink final : public worker::ActionSink {
 public:
  explicit HopSink(int m) : f_end_(m), b_start_(m) {}
  void OnAction(const worker::ActionRecord& r) override {
    if (r.action.stage != 0) return;
    if (r.action.kind == core::ActionKind::kForward) f_end_[r.action.microbatch] = r.end_s;
    if (r.action.kind == core::ActionKind::kBackwardInput) {
      b_start_[r.action.microbatch] = r.start_s;
    }
  }
  std::vector<double> RoundTrips(int skip) const {
    std::vector<double> out;
    for (size_t i = skip; i < f_end_.size(); ++i) out.push_back((b_start_[i] - f_end_[i]) * 1e6);
    return out;
  }

 private:
  std::vector<double> f_end_, b_start_;
};

// One microbatch in flight at a time: every microbatch is a round trip rank 0 -> 1 -> 0.
core::Plan PingPongPlan(int m) {
  using core::Action;
  using core::ActionKind;
  core::Plan plan = core::EmptyPlan("ping-pong", core::Placement::Linear(2), m);
  for (int i = 0; i < m; ++i) {
    plan.ranks[0].push_back(Action::F(0, i));
    plan.ranks[0].push_back(Action::Comm(ActionKind::kSendAct, 0, i, 1));
    plan.ranks[0].push_back(Action::Comm(ActionKind::kRecvGrad, 1, i, 1));
    plan.ranks[0].push_back(Action::B(0, i));
    plan.ranks[0].push_back(Action::W(0, i));
    plan.ranks[1].push_back(Action::Comm(ActionKind::kRecvAct, 0, i, 0));
    plan.ranks[1].push_back(Action::F(1, i));
    plan.ranks[1].push_back(Action::B(1, i));
    plan.ranks[1].push_back(Action::Comm(ActionKind::kSendGrad, 1, i, 0));
    plan.ranks[1].push_back(Action::W(1, i));
  }
  return plan;
}

std::vector<double> ExecutorRounds(int rank, worker::Communicator& comm, size_t bytes, int rounds) {
  const int m = kWarmupRounds + rounds;
  const core::Plan plan = PingPongPlan(m);
  std::vector<std::unique_ptr<worker::model::Stage>> stages;
  stages.push_back(std::make_unique<EchoStage>(rank, static_cast<int64_t>(bytes / 4)));
  worker::ExecutorConfig config;
  config.optimizer = worker::Optimizer::kSgd;
  config.max_grad_norm = 0;
  HopSink sink(m);
  auto exec = Must(worker::Executor::Make(plan, rank, 0, config, std::move(stages), comm, nullptr,
                                          nullptr, rank == 0 ? &sink : nullptr),
                   "executor");
  // Two iterations: the first warms the executor's buffers up, the second is measured.
  Must(exec->RunIteration(0), "executor iteration 0");
  Must(exec->RunIteration(1), "executor iteration 1");
  return rank == 0 ? sink.RoundTrips(kWarmupRounds) : std::vector<double>{};
}

// ---- both ranks -----------------------------------------------------------------------------

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
};

// One-way times (half the round trips).
Stats OneWay(std::vector<double> rtt) {
  Stats s;
  if (rtt.empty()) return s;
  for (double& v : rtt) v /= 2;
  std::sort(rtt.begin(), rtt.end());
  auto at = [&](double q) { return rtt[std::min(rtt.size() - 1, size_t(q * rtt.size()))]; };
  s.p50 = at(0.5);
  s.p99 = at(0.99);
  for (double v : rtt) s.mean += v;
  s.mean /= rtt.size();
  return s;
}

int RunRank(int rank, const std::string& dir, int rounds) {
  torch::set_num_threads(1);
  auto store = Must(worker::NewFileStore(dir), "file store");
  const int fd = ConnectTcp(rank, *store);
  worker::CommunicatorOptions opts;
  opts.pipeline_rank = rank;
  opts.pipeline_size = 2;
  opts.key_prefix = "comm/";
  auto comm = Must(worker::NewTcpCommunicator(opts, *store), "communicator");
  if (rank == 0) {
    std::printf(
        "== per-hop cost: one activation hand-over between two processes on loopback, one-way "
        "= round trip / 2 (us), %d rounds (4 MiB: %d) after %d warm-up\n",
        rounds, RoundsFor(4096, rounds), kWarmupRounds);
    std::printf("   machine at start: %s\n\n", MachineState().c_str());
    std::printf("%-8s %-10s %9s %9s %9s %12s %9s\n", "size", "path", "p50 us", "p99 us", "mean us",
                "p50-tcp us", "p99/p50");
  }
  for (int kb : kSizesKb) {
    const size_t bytes = size_t(kb) * 1024;
    const int n = RoundsFor(kb, rounds);
    const Stats tcp = OneWay(TcpRounds(rank, fd, bytes, n));
    const Stats com = OneWay(CommRounds(rank, *comm, bytes, n));
    const Stats exe = OneWay(ExecutorRounds(rank, *comm, bytes, n));
    if (rank != 0) continue;
    const std::string size =
        kb >= 1024 ? absl::StrCat(kb / 1024, " MiB") : absl::StrCat(kb, " KiB");
    for (const auto& [name, s] :
         {std::pair{"tcp", tcp}, std::pair{"comm", com}, std::pair{"executor", exe}}) {
      std::printf("%-8s %-10s %9.1f %9.1f %9.1f %+12.1f %9.2f\n", size.c_str(), name, s.p50, s.p99,
                  s.mean, s.p50 - tcp.p50, s.p50 > 0 ? s.p99 / s.p50 : 0.0);
    }
    std::fflush(stdout);
  }
  if (rank == 0) std::printf("   load average at end: %s\n\n", LoadAverage().c_str());
  ::close(fd);
  return 0;
}

}  // namespace

int RunHopBench(int rounds) {
  char tmpl[] = "/tmp/zpipe-hop-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Fail("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string rounds_arg = std::to_string(rounds);
  std::vector<std::string> args = {"zpipe_runtime_bench", "hop-peer", dir, rounds_arg};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  if (::posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
    Fail("cannot start the peer process");
  }
  const int rc = RunRank(0, dir, rounds);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Fail("the peer process failed");
  return rc;
}

int RunHopPeer(const std::string& dir, int rounds) { return RunRank(1, dir, rounds); }

}  // namespace zpipe::bench
