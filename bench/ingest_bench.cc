// Progress-ingestion benchmark: N simulated workers stream batched progress events to one
// zpipe-coordinator on loopback, while a reader polls GetJob.
//
// The coordinator runs as its own process (the real binary), so its CPU time is measured from
// /proc without the load generator's share. Every simulated worker registers through the real
// worker API, holds its own Session stream (its own TCP connection by default) and, once the
// benchmark job has assigned it a rank, streams that rank's compute actions (F, B, W of its plan)
// iteration after iteration in ProgressBatch messages of --batch events. Events are counted as
// sent by the workers and as applied by the coordinator (from GetJob's per-rank progress), so
// events the coordinator dropped do not flatter the result.
//
// Usage: zpipe_ingest_bench [--streams 256] [--pipeline 8] [--microbatches 8] [--batch 512]
//          [--seconds 10] [--warmup 2] [--getjob-interval-ms 5] [--connections N]
//          [--rate 1050000] [--coordinator-bin PATH]
//
// Two phases run back to back on the same job: "paced" (the streams together offer --rate events/s,
// spread evenly: GetJob latency and coordinator CPU at the target load; --rate 0 skips it) and
// "max" (every stream writes as fast as gRPC flow control lets it: the ingestion ceiling).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "core/plan.h"
#include "flags/flags.h"
#include "wire/compute_op.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int streams = 256;
  int pipeline = 8;
  int microbatches = 8;
  int batch = 512;
  double seconds = 10;
  double warmup = 2;
  int getjob_interval_ms = 5;
  int connections = 0;  // 0 = one per stream
  // Events/s of the paced phase (all streams together): a little over the 1M/s target, so that
  // measurement noise cannot put a coordinator that keeps up below it.
  double rate = 1'050'000;
  std::string coordinator_bin = ZPIPE_COORDINATOR_BIN;
};

bool ParseOptions(int argc, char** argv, Options& o) {
  namespace flags = zpipe::flags;
  std::unique_ptr<CLI::App> app =
      flags::NewApp("zpipe_ingest_bench", "zpipe_ingest_bench [flags]",
                    "  events per second one coordinator takes from many fake worker streams");
  constexpr int64_t kInt = std::numeric_limits<int>::max();
  flags::AddInteger(*app, "--streams", &o.streams, 1, kInt, "worker streams (default 256)");
  flags::AddInteger(*app, "--pipeline", &o.pipeline, 1, kInt, "ranks per job (default 8)");
  flags::AddInteger(*app, "--microbatches", &o.microbatches, 1, kInt, "per job (default 8)");
  flags::AddInteger(*app, "--batch", &o.batch, 1, kInt, "events per report (default 512)");
  flags::AddNumber(*app, "--seconds", &o.seconds, "measured seconds (default 10)");
  flags::AddNumber(*app, "--warmup", &o.warmup, "seconds before measuring (default 2)");
  flags::AddInteger(*app, "--getjob-interval-ms", &o.getjob_interval_ms, 0, kInt,
                    "between GetJob calls (default 5)");
  flags::AddInteger(*app, "--connections", &o.connections, 0, kInt,
                    "gRPC connections (default 0: one per stream)");
  flags::AddNumber(*app, "--rate", &o.rate, "events/s of the paced phase (default 1050000)");
  flags::AddText(*app, "--coordinator-bin", &o.coordinator_bin, "FILE", "the coordinator to run");
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    if (*exit == 0) std::exit(0);  // --help
    return false;
  }
  if (o.streams % o.pipeline != 0) {
    std::cerr << "ingest_bench: --streams must be a multiple of --pipeline\n";
    return false;
  }
  return true;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// utime + stime of a process, in seconds.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close_paren + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(f);
    if (i == 15) {
      stime = std::stod(f);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// One simulated worker: register, open the session, wait for the assignment, then stream.
class SimWorker {
 public:
  SimWorker(std::shared_ptr<grpc::Channel> channel, std::string name, int index)
      : stub_(zpipe::v1::WorkerService::NewStub(channel)), name_(std::move(name)), index_(index) {}

  bool Register() {
    zpipe::v1::RegisterWorkerRequest req;
    req.set_name(name_);
    req.set_device_kind(zpipe::v1::DEVICE_KIND_CPU);
    req.set_device_index(index_);
    req.set_host("127.0.0.1");
    req.set_memory_bytes(1ull << 30);
    zpipe::v1::RegisterWorkerResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->RegisterWorker(&ctx, req, &resp);
    if (!s.ok()) {
      std::cerr << name_ << ": register: " << s.error_message() << "\n";
      return false;
    }
    stream_ = stub_->Session(&ctx_);
    zpipe::v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(resp.worker_id());
    return stream_->Write(hello);
  }

  // Blocks until the assignment arrives; prepares the batch this worker will send.
  bool AwaitAssignment(int batch) {
    zpipe::v1::CoordinatorMessage m;
    while (stream_->Read(&m)) {
      if (!m.has_assignment()) continue;
      const zpipe::v1::Assignment& a = m.assignment();
      absl::StatusOr<zpipe::core::Plan> plan = zpipe::core::ParsePlanText(a.plan_text());
      if (!plan.ok()) return false;
      for (const zpipe::core::Action& act : plan->ranks[a.pipeline_rank()]) {
        if (!zpipe::core::IsCompute(act.kind)) continue;  // compute progress only
        actions_.push_back({zpipe::wire::ComputeOpOf(act.kind), act.stage, act.microbatch});
      }
      job_id_ = a.job_id();
      pipeline_rank_ = a.pipeline_rank();
      data_rank_ = a.data_rank();
      batch_ = batch;
      return !actions_.empty();
    }
    return false;
  }

  // Streams until `stop`; counts events written into `sent`. While *per_stream_rate > 0 the
  // batches are paced to that many events per second.
  void Stream(const std::atomic<bool>& stop, const std::atomic<double>& per_stream_rate) {
    zpipe::v1::WorkerMessage m;
    zpipe::v1::ProgressBatch* b = m.mutable_progress();
    b->set_job_id(job_id_);
    b->set_pipeline_rank(pipeline_rank_);
    b->set_data_rank(data_rank_);
    size_t next = 0;
    int iteration = 0;
    Clock::time_point next_send = Clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      const double rate = per_stream_rate.load(std::memory_order_relaxed);
      if (rate > 0) {
        const Clock::time_point now = Clock::now();
        if (next_send < now - std::chrono::milliseconds(100))
          next_send = now;  // no catch-up bursts
        std::this_thread::sleep_until(next_send);
        next_send += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(batch_ / rate));
      }
      b->clear_iterations();
      b->clear_ops();
      b->clear_stages();
      b->clear_microbatches();
      for (int i = 0; i < batch_; ++i) {
        const Event& e = actions_[next];
        b->add_iterations(iteration);
        b->add_ops(e.op);
        b->add_stages(e.stage);
        b->add_microbatches(e.microbatch);
        if (++next == actions_.size()) {
          next = 0;
          ++iteration;
        }
      }
      if (!stream_->Write(m)) break;
      sent_.fetch_add(batch_, std::memory_order_relaxed);
    }
  }

  void Close() {
    stream_->WritesDone();
    ctx_.TryCancel();
    stream_->Finish();
  }

  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  int events_per_iteration() const { return static_cast<int>(actions_.size()); }
  int pipeline_rank() const { return pipeline_rank_; }
  int data_rank() const { return data_rank_; }

 private:
  struct Event {
    zpipe::v1::ComputeOp op;
    int stage, microbatch;
  };
  std::unique_ptr<zpipe::v1::WorkerService::Stub> stub_;
  std::string name_;
  int index_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<zpipe::v1::WorkerMessage, zpipe::v1::CoordinatorMessage>>
      stream_;
  std::vector<Event> actions_;
  std::string job_id_;
  int pipeline_rank_ = 0, data_rank_ = 0, batch_ = 0;
  std::atomic<uint64_t> sent_{0};
};

// Events the coordinator has applied, from GetJob: per rank, completed iterations' events plus
// the current iteration's F/B/W counts (zb-h1 has no fused BW, so each event counts once).
uint64_t AppliedEvents(const zpipe::v1::Job& job) {
  uint64_t total = 0;
  for (const zpipe::v1::RankProgress& r : job.progress().ranks()) {
    const uint64_t per_iteration = r.forward_total() + r.backward_total() + r.weight_total();
    total += static_cast<uint64_t>(r.iteration()) * per_iteration + r.forward_done() +
             r.backward_done() + r.weight_done();
  }
  return total;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, o)) return 2;
  const int connections = o.connections > 0 ? o.connections : o.streams;
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());

  // The coordinator, as its own process.
  const std::string listen = "--listen=" + address;
  const std::string metrics = absl::StrCat("--metrics-listen=127.0.0.1:", FreePort());
  pid_t coordinator = fork();
  if (coordinator == 0) {
    int null_fd = open("/dev/null", O_WRONLY);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    execl(o.coordinator_bin.c_str(), o.coordinator_bin.c_str(), listen.c_str(), metrics.c_str(),
          "--db=:memory:", "--heartbeat-timeout=120s", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto cleanup = [&] {
    kill(coordinator, SIGTERM);
    int status;
    waitpid(coordinator, &status, 0);
  };
  std::unique_ptr<zpipe::Client> client = zpipe::Client::Create(address);
  for (int i = 0; !client->Workers().ok(); ++i) {
    if (i > 300) {
      std::cerr << "ingest_bench: coordinator did not start (" << o.coordinator_bin << ")\n";
      cleanup();
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  std::cerr << "ingest_bench: coordinator pid " << coordinator << " at " << address << "\n";

  // Workers: register all, then submit a job that needs exactly all of them.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("zpipe.bench.connection", c);  // distinct args: a connection of its own
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  std::vector<std::unique_ptr<SimWorker>> workers;
  for (int i = 0; i < o.streams; ++i) {
    workers.push_back(
        std::make_unique<SimWorker>(channels[i % connections], absl::StrCat("bench-", i), i));
    if (!workers.back()->Register()) {
      cleanup();
      return 1;
    }
  }
  zpipe::v1::JobSpec spec;
  spec.set_name("ingest-bench");
  zpipe::v1::SyntheticModel* model = spec.mutable_model()->mutable_synthetic();
  model->set_forward_ms(1);
  model->set_backward_ms(1);
  model->set_weight_ms(1);
  spec.mutable_parallel()->set_pipeline(o.pipeline);
  spec.mutable_parallel()->set_data(o.streams / o.pipeline);
  spec.mutable_schedule()->set_kind("zb-h1");
  spec.mutable_batch()->set_microbatches(o.microbatches);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(10'000'000);
  spec.mutable_train()->set_lr(0.1);
  absl::StatusOr<zpipe::SubmitResult> submitted = client->Submit(spec, "ingest-bench");
  if (!submitted.ok()) {
    std::cerr << "ingest_bench: submit: " << submitted.status() << "\n";
    cleanup();
    return 1;
  }
  {
    std::vector<std::thread> waits;
    std::atomic<int> assigned{0};
    for (auto& w : workers) {
      waits.emplace_back([&, wp = w.get()] { assigned += wp->AwaitAssignment(o.batch); });
    }
    for (std::thread& t : waits) t.join();
    if (assigned != o.streams) {
      std::cerr << "ingest_bench: only " << assigned << " of " << o.streams
                << " workers got an assignment\n";
      cleanup();
      return 1;
    }
  }

  std::atomic<bool> stop{false};
  std::atomic<double> per_stream_rate{0};
  std::vector<std::thread> streams;
  for (auto& w : workers)
    streams.emplace_back([&, wp = w.get()] { wp->Stream(stop, per_stream_rate); });

  // GetJob poller: the latency of every call made while a phase is measuring.
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop_poll{false};
  std::mutex latencies_mu;
  std::vector<double> latencies_ms;
  std::thread poller([&] {
    std::unique_ptr<zpipe::Client> c = zpipe::Client::Create(address);
    while (!stop_poll) {
      const auto t0 = Clock::now();
      absl::StatusOr<zpipe::v1::Job> job = c->Get("ingest-bench");
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (measuring && job.ok()) {
        std::lock_guard<std::mutex> lock(latencies_mu);
        latencies_ms.push_back(ms);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(o.getjob_interval_ms));
    }
  });

  auto sent_total = [&] {
    uint64_t s = 0;
    for (auto& w : workers) s += w->sent();
    return s;
  };
  // Applied events and the moment they were counted (the middle of the GetJob call).
  auto applied_now = [&](Clock::time_point* at) -> std::optional<uint64_t> {
    const auto t0 = Clock::now();
    absl::StatusOr<zpipe::v1::Job> job = client->Get("ingest-bench");
    *at = t0 + (Clock::now() - t0) / 2;
    if (!job.ok()) {
      std::cerr << "ingest_bench: GetJob: " << job.status() << "\n";
      return std::nullopt;
    }
    return AppliedEvents(*job);
  };

  struct PhaseResult {
    std::string name;
    double sent_rate = 0, applied_rate = -1, coordinator_cpu = 0, generator_cpu = 0;  // -1: unknown
    std::vector<double> latencies_ms;
  };
  auto run_phase = [&](const std::string& name, double total_rate, double warmup) {
    per_stream_rate = total_rate / o.streams;
    std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
    {
      std::lock_guard<std::mutex> lock(latencies_mu);
      latencies_ms.clear();
    }
    Clock::time_point a0, a1;
    const std::optional<uint64_t> applied0 = applied_now(&a0);
    const uint64_t sent0 = sent_total();
    const double ccpu0 = ProcessCpuSeconds(coordinator);
    const double bcpu0 = SelfCpuSeconds();
    const auto t0 = Clock::now();
    measuring = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
    measuring = false;
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const uint64_t sent1 = sent_total();
    const double ccpu1 = ProcessCpuSeconds(coordinator);
    const double bcpu1 = SelfCpuSeconds();
    const std::optional<uint64_t> applied1 = applied_now(&a1);
    PhaseResult r;
    r.name = name;
    r.sent_rate = (sent1 - sent0) / wall;
    if (applied0 && applied1) {
      r.applied_rate = (*applied1 - *applied0) / std::chrono::duration<double>(a1 - a0).count();
    }
    r.coordinator_cpu = (ccpu1 - ccpu0) / wall;
    r.generator_cpu = (bcpu1 - bcpu0) / wall;
    std::lock_guard<std::mutex> lock(latencies_mu);
    r.latencies_ms = latencies_ms;
    return r;
  };

  // Paced first: the unpaced phase can leave a backlog in the coordinator that would distort it.
  std::vector<PhaseResult> results;
  if (o.rate > 0)
    results.push_back(run_phase(absl::StrFormat("paced %.0f/s", o.rate), o.rate, o.warmup));
  results.push_back(run_phase("max", 0, o.warmup));

  stop = true;
  stop_poll = true;
  poller.join();
  for (auto& w : workers) w->Close();
  for (std::thread& t : streams) t.join();
  cleanup();

  std::cout << absl::StrFormat(
      "== progress ingestion: %d streams (%d connections), batches of %d events, job p=%d d=%d "
      "m=%d zb-h1;\n"
      "   %.0fs per phase, %d cores; CPU in %% of one core; events applied = counted by the "
      "coordinator\n",
      o.streams, connections, o.batch, o.pipeline, o.streams / o.pipeline, o.microbatches,
      o.seconds, static_cast<int>(std::thread::hardware_concurrency()));
  std::cout << absl::StrFormat("%-16s %12s %12s %9s %9s %8s %9s %9s %9s\n", "phase", "sent/s",
                               "applied/s", "coord CPU", "gen CPU", "GetJobs", "p50 ms", "p99 ms",
                               "max ms");
  bool met = false;
  for (const PhaseResult& r : results) {
    const double p99 = Percentile(r.latencies_ms, 0.99);
    auto ms = [&](double q) {
      return r.latencies_ms.empty() ? std::string("n/a")
                                    : absl::StrFormat("%.2f", Percentile(r.latencies_ms, q));
    };
    std::cout << absl::StrFormat(
        "%-16s %12.0f %12s %8.0f%% %8.0f%% %8zu %9s %9s %9s\n", r.name, r.sent_rate,
        r.applied_rate < 0 ? "n/a" : absl::StrFormat("%.0f", r.applied_rate),
        100 * r.coordinator_cpu, 100 * r.generator_cpu, r.latencies_ms.size(), ms(0.5), ms(0.99),
        ms(1.0));
    if (r.applied_rate >= 1e6 && !r.latencies_ms.empty() && p99 < 10) met = true;
  }
  std::cout << "target (>= 1,000,000 events/s applied with GetJob p99 < 10 ms in one phase): "
            << (met ? "met" : "NOT met") << "\n";
  for (const PhaseResult& r : results) {
    if (r.latencies_ms.empty() || r.applied_rate < 0) {
      std::cout << "n/a: no GetJob answered within its 10 s deadline during the phase\n";
      break;
    }
  }
  return 0;
}
