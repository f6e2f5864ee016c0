// Scale by simulation (scripts/bench scale): the real zpipe-coordinator against thousands of
// simulated workers held by this one process, and tens to hundreds of concurrent synthetic jobs.
//
// Each simulated worker does what tests/cli/fake_worker does for one worker, through the real
// WorkerService: registers, holds a Session stream with heartbeats at the coordinator's default
// interval, takes an assignment, reports its rank's compute actions (F, B, W of the plan, with
// start and end times) as they "happen" during each iteration, flushed every --flush like the
// worker daemon's progress reporter, one IterationReport per iteration, then RankFinished. Unlike
// the fake worker it holds no thread: workers are gRPC callback reactors, --workers-per-channel of
// them share a connection, and a few ticker threads drive their clocks. The coordinator runs as
// its own process (killed on every exit path, and by the kernel if this process dies) so its CPU
// time and memory come from /proc without the load generator's share.
//
// Per size it prints: coordinator CPU seconds (and cores) over the run, peak RSS and threads;
// heartbeat sending: from when a heartbeat was due to when its write completed (the Session
// protocol acknowledges no heartbeat; a stream is FIFO, so a heartbeat waits behind what its
// worker sent before, and HTTP/2 flow control holds writes back once the coordinator's reader of
// that stream is a window behind; a reader less far behind holds them in its buffers, which only
// the timeouts column sees); a unary WorkerService call on the workers' connections once
// per heartbeat interval per connection (same connections and server, no stream backlog); GetJob
// latency from a client thread polling the running jobs; progress events/s (and messages/s)
// whose writes completed; submit -> every rank assigned; workers the coordinator declared dead
// (or whose session it ended), with when the first was, and the generator's own heartbeat
// lateness, so that a timeout can be blamed on the coordinator rather than on this process.
//
// Usage: zpipe_scale_bench [--sizes 256,1024,4096] [--duration 20s] [--pipeline 4] [--data 4]
//          [--microbatches 8] [--iteration 1s] [--flush 200ms] [--workers-per-channel 64]
//          [--tickers 2] [--check] [--coordinator-bin PATH] [--coordinator-log FILE]
// --check: exit 1 unless every job SUCCEEDED and no worker was declared dead (the smoke test).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/machine_state.h"
#include "client/client.h"
#include "core/plan.h"
#include "flags/flags.h"
#include "tests/support/compute_progress.h"
#include "wire/compute_op.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace {

namespace v1 = zpipe::v1;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int> sizes = {256, 1024, 4096};
  absl::Duration duration = absl::Seconds(20);  // of training, per size
  int pipeline = 4;
  int data = 4;
  int microbatches = 8;
  absl::Duration iteration = absl::Seconds(1);
  absl::Duration flush = absl::Milliseconds(200);
  int workers_per_channel = 64;
  int tickers = 2;
  bool check = false;
  std::string coordinator_bin = ZPIPE_COORDINATOR_BIN;
  std::string coordinator_log;  // empty: /dev/null
};

bool ParseOptions(int argc, char** argv, Options& o) {
  namespace flags = zpipe::flags;
  std::unique_ptr<CLI::App> app = flags::NewApp(
      "zpipe_scale_bench", "zpipe_scale_bench [flags]",
      "  one coordinator against thousands of simulated workers and many concurrent jobs");
  constexpr int64_t kInt = std::numeric_limits<int>::max();
  std::string sizes = "256,1024,4096";
  flags::AddText(*app, "--sizes", &sizes, "N,N,...",
                 "simulated workers per run, one table row each (default 256,1024,4096)");
  flags::AddDuration(*app, "--duration", &o.duration, "training time per run (default 20s)");
  flags::AddInteger(*app, "--pipeline", &o.pipeline, 1, kInt, "p of every job (default 4)");
  flags::AddInteger(*app, "--data", &o.data, 1, kInt,
                    "d of every job (default 4); jobs = workers / (p * d)");
  flags::AddInteger(*app, "--microbatches", &o.microbatches, 1, kInt, "per job (default 8)");
  flags::AddDuration(*app, "--iteration", &o.iteration, "simulated iteration time (default 1s)");
  flags::AddDuration(*app, "--flush", &o.flush,
                     "progress batches are sent this often, as the worker daemon does "
                     "(default 200ms)");
  flags::AddInteger(*app, "--workers-per-channel", &o.workers_per_channel, 1, kInt,
                    "simulated workers per gRPC connection (default 64)");
  flags::AddInteger(*app, "--tickers", &o.tickers, 1, 64,
                    "threads driving the workers' clocks (default 2)");
  flags::AddSwitch(*app, "--check", &o.check,
                   "exit 1 unless every job succeeded and no worker was declared dead");
  flags::AddText(*app, "--coordinator-bin", &o.coordinator_bin, "FILE", "the coordinator to run");
  flags::AddText(*app, "--coordinator-log", &o.coordinator_log, "FILE",
                 "the coordinator's stdout and stderr, appended (default: discarded)");
  if (std::optional<int> exit =
          flags::ParseMain(*app, flags::Args(argc, argv), std::cout, std::cerr)) {
    if (*exit == 0) std::exit(0);  // --help
    return false;
  }
  o.sizes.clear();
  for (absl::string_view s : absl::StrSplit(sizes, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0 || n % (o.pipeline * o.data) != 0) {
      std::cerr << "scale_bench: --sizes: '" << s << "' is not a positive multiple of p * d = "
                << o.pipeline * o.data << "\n";
      return false;
    }
    o.sizes.push_back(n);
  }
  return !o.sizes.empty();
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

// A numeric field of /proc/<pid>/status ("VmHWM", "VmRSS" in kB, "Threads"); -1 when absent.
long ProcessStatus(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream value(line.substr(field.size() + 1));
    long n = -1;
    value >> n;
    return n;
  }
  return -1;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

// Samples from many threads.
class Samples {
 public:
  void Add(double v) {
    absl::MutexLock lock(&mu_);
    v_.push_back(v);
  }
  std::vector<double> Take() {
    absl::MutexLock lock(&mu_);
    return std::move(v_);
  }

 private:
  absl::Mutex mu_;
  std::vector<double> v_ ABSL_GUARDED_BY(mu_);
};

// The coordinator process: started on construction, SIGTERMed (then SIGKILLed) on destruction,
// and SIGKILLed by the kernel should this process die first (PR_SET_PDEATHSIG).
class CoordinatorProcess {
 public:
  CoordinatorProcess(const std::string& bin, const std::string& address, int max_workers,
                     const std::string& log) {
    const std::string listen = "--listen=" + address;
    const std::string metrics = absl::StrCat("--metrics-listen=127.0.0.1:", FreePort());
    const std::string max = absl::StrCat("--max-workers=", max_workers);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      int null_fd = log.empty() ? open("/dev/null", O_WRONLY)
                                : open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(null_fd, 1);
      dup2(null_fd, 2);
      execl(bin.c_str(), bin.c_str(), listen.c_str(), metrics.c_str(), max.c_str(),
            "--db=:memory:", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~CoordinatorProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {  // 10 s, then SIGKILL
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool exited() {
    int status;
    return waitpid(pid_, &status, WNOHANG) == pid_ && (pid_ = -1, true);
  }

 private:
  pid_t pid_ = -1;
};

// Per job: when it was submitted and when each of its ranks got its assignment.
class JobTimes {
 public:
  void Submitted(const std::string& job) {
    absl::MutexLock lock(&mu_);
    jobs_[job].submitted = Clock::now();
  }
  void Assigned(const std::string& job) {
    absl::MutexLock lock(&mu_);
    Times& t = jobs_[job];
    ++t.assigned;
    t.last_assigned = Clock::now();
  }
  // Seconds from submit to the last rank's assignment, for jobs whose `ranks` ranks all got one.
  std::vector<double> ScheduleSeconds(int ranks) {
    absl::MutexLock lock(&mu_);
    std::vector<double> out;
    for (const auto& [job, t] : jobs_) {
      if (t.assigned >= ranks && t.submitted != Clock::time_point()) {
        out.push_back(std::chrono::duration<double>(t.last_assigned - t.submitted).count());
      }
    }
    return out;
  }
  int FullyAssigned(int ranks) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [job, t] : jobs_) n += t.assigned >= ranks;
    return n;
  }

 private:
  struct Times {
    Clock::time_point submitted, last_assigned;
    int assigned = 0;
  };
  absl::Mutex mu_;
  std::map<std::string, Times> jobs_ ABSL_GUARDED_BY(mu_);
};

// What every simulated worker adds to.
struct Shared {
  std::atomic<uint64_t> events_written{0};  // progress events whose write completed
  std::atomic<uint64_t> messages_written{0};  // messages of any kind whose write completed
  std::atomic<int> registered{0};
  std::atomic<int> register_failed{0};
  std::atomic<int> sessions_ended_early{0};  // ended by the coordinator, not by us
  std::atomic<int> sessions_done{0};
  std::atomic<int64_t> first_early_end_ns{0};  // steady clock; 0 = none
  std::atomic<int> ranks_finished{0};
  std::atomic<int64_t> max_heartbeat_late_us{0};  // the generator's own lateness
  Samples heartbeat_write_ms;  // due -> write done, while `measuring`
  std::atomic<bool> measuring{false};
  absl::Mutex mu;
  absl::CondVar cv;  // signalled when a worker registered, failed to, or ended
  std::string first_error ABSL_GUARDED_BY(mu);
  JobTimes jobs;
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration flush;

  std::string FirstError() {
    absl::MutexLock lock(&mu);
    return first_error;
  }
  void Error(const std::string& e) {
    absl::MutexLock lock(&mu);
    if (first_error.empty()) first_error = e;
  }
  void Notify() {
    absl::MutexLock lock(&mu);
    cv.SignalAll();
  }
};

// One simulated worker: a Session stream as a callback reactor. Writes are queued (one in flight
// at a time, as gRPC requires); Tick() is called every few milliseconds by a ticker thread and
// writes what is due: a heartbeat, the progress events that "happened" since the last flush, an
// iteration's report, RankFinished.
class SimWorker : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  SimWorker(v1::WorkerService::Stub& stub, Shared& shared, std::string name, int index,
            absl::Duration iteration)
      : stub_(stub),
        shared_(shared),
        name_(std::move(name)),
        index_(index),
        iteration_(iteration) {}

  // Registers, then opens the session; asynchronous (shared.registered / register_failed).
  void Start() {
    reg_req_.set_name(name_);
    reg_req_.set_device_kind(v1::DEVICE_KIND_CPU);
    reg_req_.set_device_index(index_);
    reg_req_.set_host("127.0.0.1");
    reg_req_.set_memory_bytes(8ull << 30);
    reg_req_.set_version("scale-bench");
    reg_ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stub_.async()->RegisterWorker(&reg_ctx_, &reg_req_, &reg_resp_,
                                  [this](grpc::Status s) { OnRegistered(s); });
  }

  // Ends the session (the coordinator sees the stream cancelled).
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    reg_ctx_.TryCancel();
    ctx_.TryCancel();
  }

  void Tick(Clock::time_point now) {
    std::vector<v1::WorkerMessage> due;
    Clock::time_point heartbeat_due;
    {
      absl::MutexLock lock(&mu_);
      if (!open_ || stopping_) return;
      if (now >= next_heartbeat_) {
        const int64_t late_us =
            std::chrono::duration_cast<std::chrono::microseconds>(now - next_heartbeat_).count();
        int64_t max = shared_.max_heartbeat_late_us.load();
        while (late_us > max &&
               !shared_.max_heartbeat_late_us.compare_exchange_weak(max, late_us)) {
        }
        heartbeat_due = next_heartbeat_;
        next_heartbeat_ = now + absl::ToChronoNanoseconds(shared_.heartbeat_interval);
        v1::WorkerMessage& m = due.emplace_back();
        m.mutable_heartbeat()->set_job_id(job_id_);
      }
      if (!job_id_.empty() && now >= next_flush_) {
        next_flush_ = now + absl::ToChronoNanoseconds(shared_.flush);
        DueProgress(now, due);
      }
    }
    for (v1::WorkerMessage& m : due) {
      const bool heartbeat = m.has_heartbeat();
      Enqueue(std::move(m), heartbeat ? heartbeat_due : now);
    }
  }

  void OnWriteDone(bool ok) override {
    v1::WorkerMessage* next = nullptr;
    {
      absl::MutexLock lock(&write_mu_);
      const v1::WorkerMessage& m = out_.front().message;
      if (ok) shared_.messages_written.fetch_add(1, std::memory_order_relaxed);
      if (ok && m.has_progress()) {
        shared_.events_written.fetch_add(m.progress().iterations_size(),
                                         std::memory_order_relaxed);
      }
      if (ok && m.has_heartbeat() && shared_.measuring) {
        shared_.heartbeat_write_ms.Add(
            std::chrono::duration<double, std::milli>(Clock::now() - out_.front().due).count());
      }
      if (ok && m.has_finished()) ++shared_.ranks_finished;
      out_.pop_front();
      if (ok && !out_.empty()) {
        next = &out_.front().message;
      } else {
        writing_ = false;
        if (!ok) write_broken_ = true;
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_assignment()) {
      Assign(in_.assignment());
    } else if (in_.has_cancel()) {
      absl::MutexLock lock(&mu_);
      if (job_id_ == in_.cancel().job_id()) job_id_.clear();
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    bool early;
    {
      absl::MutexLock lock(&mu_);
      open_ = false;
      early = !stopping_;
    }
    if (early) {
      int64_t none = 0;
      shared_.first_early_end_ns.compare_exchange_strong(
          none, Clock::now().time_since_epoch().count());
      ++shared_.sessions_ended_early;
      shared_.Error(absl::StrCat(name_, ": session ended by the coordinator: ", s.error_message()));
    }
    {
      absl::MutexLock lock(&done_mu_);
      done_ = true;
    }
    ++shared_.sessions_done;
    shared_.Notify();
  }

  // Messages queued and not yet written on a stream still open, and how long the oldest has
  // waited since it was due.
  std::pair<size_t, double> Backlog(Clock::time_point now) {
    absl::MutexLock lock(&write_mu_);
    if (out_.empty() || write_broken_) return {0, 0.0};
    return {out_.size(), std::chrono::duration<double>(now - out_.front().due).count()};
  }

  // Until OnDone has run (after Stop, or a session that never opened).
  bool done() {
    absl::MutexLock lock(&done_mu_);
    return done_;
  }

 private:
  struct Event {
    v1::ComputeOp op;
    int stage, microbatch;
  };

  void OnRegistered(const grpc::Status& s) {
    if (!s.ok()) {
      ++shared_.register_failed;
      shared_.Error(absl::StrCat(name_, ": register: ", s.error_message()));
      {
        absl::MutexLock lock(&done_mu_);
        done_ = true;
      }
      shared_.Notify();
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        absl::MutexLock done_lock(&done_mu_);
        done_ = true;
        return;
      }
      open_ = true;
      // Spread the heartbeats over the interval, as independently started workers would.
      next_heartbeat_ =
          Clock::now() + std::chrono::microseconds(
                             (index_ * 7919) % std::max<int64_t>(
                                                   1, absl::ToInt64Microseconds(
                                                          shared_.heartbeat_interval)));
    }
    stub_.async()->Session(&ctx_, this);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(reg_resp_.worker_id());
    Enqueue(std::move(hello));
    StartRead(&in_);
    StartCall();
    ++shared_.registered;
    shared_.Notify();
  }

  void Enqueue(v1::WorkerMessage m, Clock::time_point due = Clock::now()) {
    v1::WorkerMessage* start = nullptr;
    {
      absl::MutexLock lock(&write_mu_);
      if (write_broken_) return;
      out_.push_back({std::move(m), due});  // deque: references to the front stay valid
      if (!writing_) {
        writing_ = true;
        start = &out_.front().message;
      }
    }
    if (start != nullptr) StartWrite(start);
  }

  void Assign(const v1::Assignment& a) {
    absl::StatusOr<zpipe::core::Plan> plan = zpipe::core::ParsePlanText(a.plan_text());
    if (!plan.ok() || a.pipeline_rank() >= static_cast<int>(plan->ranks.size())) {
      shared_.Error(absl::StrCat(name_, ": unusable plan: ", plan.status().message()));
      return;
    }
    absl::MutexLock lock(&mu_);
    actions_.clear();
    for (const zpipe::core::Action& act : plan->ranks[a.pipeline_rank()]) {
      if (zpipe::core::IsCompute(act.kind)) actions_.push_back(act);
    }
    job_id_ = a.job_id();
    pipeline_rank_ = a.pipeline_rank();
    data_rank_ = a.data_rank();
    pipeline_size_ = a.pipeline_size();
    iterations_ = a.spec().train().iterations();
    it_ = a.start_iteration();
    sent_in_it_ = 0;
    it_start_ = Clock::now();
    next_flush_ = it_start_ + absl::ToChronoNanoseconds(shared_.flush);
    shared_.jobs.Assigned(job_id_);
  }

  // The events of the current iteration that are done by `now` (spread evenly over it), then,
  // for each iteration that ended, its report, and after the last one RankFinished.
  void DueProgress(Clock::time_point now, std::vector<v1::WorkerMessage>& due)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto it_time = absl::ToChronoNanoseconds(iteration_);
    while (!job_id_.empty()) {
      const double frac =
          std::min(1.0, std::chrono::duration<double>(now - it_start_) /
                            std::chrono::duration<double>(it_time));
      const size_t done = static_cast<size_t>(frac * actions_.size());
      if (done > sent_in_it_) {
        v1::WorkerMessage& m = due.emplace_back();
        v1::ProgressBatch* b = m.mutable_progress();
        b->set_job_id(job_id_);
        b->set_pipeline_rank(pipeline_rank_);
        b->set_data_rank(data_rank_);
        // Event k of the iteration ran in its k-th slice of the iteration, on the wall clock
        // (seconds since the epoch), as the worker daemon reports it: the coordinator keeps
        // the timeline (TraceStore) and estimates the worker's clock from it.
        const double it_start_s =
            absl::ToDoubleSeconds(absl::Now() - absl::Time()) -
            std::chrono::duration<double>(now - it_start_).count();
        const double slot_s = absl::ToDoubleSeconds(iteration_) / actions_.size();
        for (size_t k = sent_in_it_; k < done; ++k) {
          const zpipe::core::Action& act = actions_[k];
          b->add_iterations(it_);
          b->add_ops(zpipe::wire::ComputeOpOf(act.kind));
          b->add_stages(act.stage);
          b->add_microbatches(act.microbatch);
          b->add_start_times(it_start_s + k * slot_s);
          b->add_end_times(it_start_s + (k + 0.9) * slot_s);
        }
        sent_in_it_ = done;
      }
      if (frac < 1.0) return;
      *due.emplace_back().mutable_iteration() = zpipe::testing::MakeIterationReport(
          job_id_, it_, pipeline_rank_, data_rank_, pipeline_size_,
          absl::ToDoubleSeconds(iteration_));
      ++it_;
      sent_in_it_ = 0;
      it_start_ += it_time;
      if (it_ >= iterations_) {
        v1::RankFinished* f = due.emplace_back().mutable_finished();
        f->set_job_id(job_id_);
        f->set_pipeline_rank(pipeline_rank_);
        f->set_data_rank(data_rank_);
        job_id_.clear();
      }
    }
  }

  v1::WorkerService::Stub& stub_;
  Shared& shared_;
  const std::string name_;
  const int index_;
  const absl::Duration iteration_;

  grpc::ClientContext reg_ctx_;
  v1::RegisterWorkerRequest reg_req_;
  v1::RegisterWorkerResponse reg_resp_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;  // the read in flight; touched only by OnReadDone

  absl::Mutex write_mu_;
  struct Outgoing {
    v1::WorkerMessage message;
    Clock::time_point due;  // when the simulated worker meant to send it
  };
  std::deque<Outgoing> out_ ABSL_GUARDED_BY(write_mu_);  // front: the write in flight
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;
  bool write_broken_ ABSL_GUARDED_BY(write_mu_) = false;

  absl::Mutex mu_;  // the simulated worker's state; taken before done_mu_
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point next_heartbeat_ ABSL_GUARDED_BY(mu_);
  Clock::time_point next_flush_ ABSL_GUARDED_BY(mu_);
  Clock::time_point it_start_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);  // empty when idle
  std::vector<zpipe::core::Action> actions_ ABSL_GUARDED_BY(mu_);
  int pipeline_rank_ ABSL_GUARDED_BY(mu_) = 0;
  int data_rank_ ABSL_GUARDED_BY(mu_) = 0;
  int pipeline_size_ ABSL_GUARDED_BY(mu_) = 1;
  int iterations_ ABSL_GUARDED_BY(mu_) = 0;
  int it_ ABSL_GUARDED_BY(mu_) = 0;
  size_t sent_in_it_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex done_mu_;
  bool done_ ABSL_GUARDED_BY(done_mu_) = false;
};

struct Row {
  int workers = 0, jobs = 0;
  double cpu_s = 0, wall_s = 0;  // coordinator CPU over the run (register .. all finished)
  long rss_peak_kb = -1;
  long threads_peak = -1;
  std::vector<double> ping_ms, getjob_ms, schedule_s, heartbeat_write_ms;
  double events_per_s = 0, messages_per_s = 0;
  double generator_cpu_s = 0;  // this process, over the run
  int declared_dead = 0, sessions_ended_early = 0, jobs_succeeded = 0, register_failed = 0;
  double max_heartbeat_late_s = 0;
  // Seconds from the last submit to the first session the coordinator ended; the window measured.
  std::optional<double> first_early_end_s;
  int workers_with_backlog = 0;  // when the jobs had ended: messages not yet written
  double oldest_backlog_s = 0;
  double window_from_s = 0, window_to_s = 0;
  std::string error;
};

v1::JobSpec SyntheticSpec(const Options& o, int iterations) {
  v1::JobSpec spec;
  spec.set_name("scale-bench");
  v1::SyntheticModel* model = spec.mutable_model()->mutable_synthetic();
  model->set_forward_ms(1);
  model->set_backward_ms(1);
  model->set_weight_ms(1);
  spec.mutable_parallel()->set_pipeline(o.pipeline);
  spec.mutable_parallel()->set_data(o.data);
  spec.mutable_schedule()->set_kind("zb-h1");
  spec.mutable_batch()->set_microbatches(o.microbatches);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_lr(0.1);
  return spec;
}

// Waits up to `timeout` for `done()`, re-checking on every shared notification and every 50 ms.
template <typename F>
bool WaitFor(Shared& shared, absl::Duration timeout, F done) {
  const auto deadline = Clock::now() + absl::ToChronoNanoseconds(timeout);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    absl::MutexLock lock(&shared.mu);
    shared.cv.WaitWithTimeout(&shared.mu, absl::Milliseconds(50));
  }
  return true;
}

Row RunSize(const Options& o, int n_workers) {
  Row row;
  row.workers = n_workers;
  const int ranks = o.pipeline * o.data;
  row.jobs = n_workers / ranks;
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  CoordinatorProcess coordinator(o.coordinator_bin, address, n_workers + 16, o.coordinator_log);
  std::unique_ptr<zpipe::Client> client = zpipe::Client::Create(address);
  for (int i = 0; !client->Workers().ok(); ++i) {
    if (i > 300 || coordinator.exited()) {
      row.error = "the coordinator did not start (" + o.coordinator_bin + ")";
      return row;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::atomic<long> rss_peak{-1}, threads_peak{-1};
  auto sample_process = [&] {
    rss_peak = std::max(rss_peak.load(), ProcessStatus(coordinator.pid(), "VmHWM"));
    threads_peak = std::max(threads_peak.load(), ProcessStatus(coordinator.pid(), "Threads"));
  };

  Shared shared;
  shared.flush = o.flush;
  // The coordinator's default: --heartbeat-timeout 10s, heartbeats every timeout / 5.
  const absl::Duration heartbeat_timeout = absl::Seconds(10);
  shared.heartbeat_interval = heartbeat_timeout / 5;

  const double cpu0 = ProcessCpuSeconds(coordinator.pid());
  const double generator_cpu0 = ProcessCpuSeconds(getpid());
  const auto t0 = Clock::now();
  const int n_channels = (n_workers + o.workers_per_channel - 1) / o.workers_per_channel;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;
  for (int c = 0; c < n_channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("zpipe.bench.connection", c);  // distinct args: a connection of its own
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::WorkerService::NewStub(channels.back()));
  }
  std::vector<std::unique_ptr<SimWorker>> workers;
  for (int i = 0; i < n_workers; ++i) {
    workers.push_back(std::make_unique<SimWorker>(*stubs[i / o.workers_per_channel], shared,
                                                  absl::StrCat("sim-", i), i, o.iteration));
  }
  // Tickers: each drives a slice of the workers every 5 ms.
  std::atomic<bool> stop_tickers{false};
  std::vector<std::thread> tickers;
  for (int t = 0; t < o.tickers; ++t) {
    tickers.emplace_back([&, t] {
      while (!stop_tickers) {
        const auto now = Clock::now();
        for (size_t i = t; i < workers.size(); i += o.tickers) workers[i]->Tick(now);
        std::this_thread::sleep_until(now + std::chrono::milliseconds(5));
      }
    });
  }
  auto stop_all = [&] {
    for (auto& w : workers) w->Stop();
    WaitFor(shared, absl::Seconds(30), [&] {
      return std::all_of(workers.begin(), workers.end(), [](auto& w) { return w->done(); });
    });
    stop_tickers = true;
    for (std::thread& t : tickers) t.join();
  };

  for (auto& w : workers) w->Start();
  if (!WaitFor(shared, absl::Seconds(120), [&] {
        return shared.registered + shared.register_failed >= n_workers;
      }) ||
      shared.register_failed > 0) {
    row.register_failed = shared.register_failed;
    row.error = absl::StrCat(shared.registered.load(), " of ", n_workers,
                             " workers registered; first error: ", shared.FirstError());
    stop_all();
    return row;
  }
  std::cerr << absl::StrFormat("scale_bench: %d workers registered in %.1f s\n", n_workers,
                               std::chrono::duration<double>(Clock::now() - t0).count());
  sample_process();

  // Pollers: GetJob over the jobs, round robin, and a WorkerService round trip per connection
  // once per heartbeat interval.
  std::vector<std::string> job_ids;
  for (int j = 0; j < row.jobs; ++j) job_ids.push_back(absl::StrCat("scale-", j));
  std::atomic<bool> measuring{false}, stop_pollers{false};
  Samples getjob_ms, ping_ms;
  std::thread getjob_poller([&] {
    std::unique_ptr<zpipe::Client> c = zpipe::Client::Create(address);
    for (size_t k = 0; !stop_pollers; ++k) {
      const auto s = Clock::now();
      absl::StatusOr<v1::Job> job = c->Get(job_ids[k % job_ids.size()]);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
      if (measuring && job.ok()) getjob_ms.Add(ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::thread pinger([&] {
    const auto period = absl::ToChronoNanoseconds(shared.heartbeat_interval) / n_channels;
    for (size_t k = 0; !stop_pollers; ++k) {
      const auto s = Clock::now();
      v1::RendezvousGetRequest req;
      req.set_job_id(job_ids[k % job_ids.size()]);
      req.set_key("scale-bench/ping");
      v1::RendezvousGetResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      stubs[k % n_channels]->RendezvousGet(&ctx, req, &resp);  // NOT_FOUND: the key never exists
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s).count();
      if (measuring) ping_ms.Add(ms);
      std::this_thread::sleep_until(s + period);
    }
  });

  // Jobs: iterations so that each trains for --duration; submitted from 4 threads at once.
  const int iterations =
      std::max(2, static_cast<int>(std::ceil(absl::FDivDuration(o.duration, o.iteration))));
  const v1::JobSpec spec = SyntheticSpec(o, iterations);
  std::atomic<int> submit_failed{0};
  {
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&, t] {
        std::unique_ptr<zpipe::Client> c = zpipe::Client::Create(address);
        for (int j = t; j < row.jobs; j += 4) {
          shared.jobs.Submitted(job_ids[j]);
          absl::StatusOr<zpipe::SubmitResult> r = c->Submit(spec, job_ids[j]);
          if (!r.ok()) {
            ++submit_failed;
            shared.Error(absl::StrCat("submit ", job_ids[j], ": ", r.status().ToString()));
          }
        }
      });
    }
    for (std::thread& t : submitters) t.join();
  }
  const auto submitted = Clock::now();
  // Measure from when every job runs (or 10 s at most) until the first may finish.
  WaitFor(shared, absl::Seconds(10), [&] { return shared.jobs.FullyAssigned(ranks) >= row.jobs; });
  const auto m0 = Clock::now();
  const uint64_t events0 = shared.events_written;
  const uint64_t messages0 = shared.messages_written;
  measuring = true;
  shared.measuring = true;
  const auto measure_until =
      submitted + absl::ToChronoNanoseconds(std::max(absl::Seconds(1), o.duration - o.iteration));
  while (Clock::now() < measure_until) {
    sample_process();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  measuring = false;
  shared.measuring = false;
  const auto m1 = Clock::now();
  row.window_from_s = std::chrono::duration<double>(m0 - submitted).count();
  row.window_to_s = std::chrono::duration<double>(m1 - submitted).count();
  row.events_per_s =
      (shared.events_written - events0) / std::chrono::duration<double>(m1 - m0).count();
  row.messages_per_s =
      (shared.messages_written - messages0) / std::chrono::duration<double>(m1 - m0).count();
  // Then until every rank finished, or every job has ended (a failed job's ranks never finish).
  auto all_ended = [&] {
    absl::StatusOr<std::vector<v1::Job>> jobs = client->ListAll();
    return jobs.ok() && static_cast<int>(jobs->size()) == row.jobs &&
           std::all_of(jobs->begin(), jobs->end(), [](const v1::Job& j) {
             return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
                    j.state() == v1::JOB_STATE_CANCELLED;
           });
  };
  auto next_list = Clock::now();
  WaitFor(shared, o.duration + absl::Seconds(60), [&] {
    if (shared.ranks_finished >= row.jobs * ranks) return true;
    if (Clock::now() < next_list) return false;
    next_list = Clock::now() + std::chrono::seconds(2);
    return all_ended();
  });
  sample_process();
  stop_pollers = true;
  getjob_poller.join();
  pinger.join();

  for (const std::string& id : job_ids) {
    absl::StatusOr<v1::Job> job = client->WaitForTerminal(id);
    if (job.ok() && job->state() == v1::JOB_STATE_SUCCEEDED) {
      ++row.jobs_succeeded;
    } else if (row.error.empty()) {
      row.error = absl::StrCat(id, ": ",
                               job.ok() ? absl::StrCat(v1::JobState_Name(job->state()), " ",
                                                       job->reason())
                                        : job.status().ToString());
    }
    if (!job.ok()) break;
  }
  if (absl::StatusOr<std::vector<v1::Worker>> all = client->Workers(/*include_dead=*/true);
      all.ok()) {
    for (const v1::Worker& w : *all) row.declared_dead += w.state() == v1::WORKER_STATE_DEAD;
  }
  for (auto& w : workers) {
    const auto [queued, age] = w->Backlog(Clock::now());
    row.workers_with_backlog += queued > 0;
    row.oldest_backlog_s = std::max(row.oldest_backlog_s, age);
  }
  row.cpu_s = ProcessCpuSeconds(coordinator.pid()) - cpu0;
  row.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  row.generator_cpu_s = ProcessCpuSeconds(getpid()) - generator_cpu0;
  sample_process();
  row.rss_peak_kb = rss_peak;
  row.threads_peak = threads_peak;
  row.sessions_ended_early = shared.sessions_ended_early;
  row.max_heartbeat_late_s = shared.max_heartbeat_late_us / 1e6;
  if (const int64_t ns = shared.first_early_end_ns; ns != 0) {
    row.first_early_end_s =
        std::chrono::duration<double>(Clock::time_point(Clock::duration(ns)) - submitted).count();
  }
  row.getjob_ms = getjob_ms.Take();
  row.ping_ms = ping_ms.Take();
  row.heartbeat_write_ms = shared.heartbeat_write_ms.Take();
  row.schedule_s = shared.jobs.ScheduleSeconds(ranks);
  if (row.error.empty()) row.error = shared.FirstError();
  stop_all();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, o)) return 2;
  signal(SIGPIPE, SIG_IGN);
  const std::string load_before = zpipe::bench::LoadAverage();
  std::vector<Row> rows;
  for (int n : o.sizes) rows.push_back(RunSize(o, n));

  std::cout << absl::StrFormat(
      "== scale: one coordinator, simulated workers (%d per connection), jobs p=%d d=%d m=%d "
      "zb-h1 synthetic,\n"
      "   %s of training at %s per iteration, progress flushed every %s; load %s before, %s "
      "after\n",
      o.workers_per_channel, o.pipeline, o.data, o.microbatches, absl::FormatDuration(o.duration),
      absl::FormatDuration(o.iteration), absl::FormatDuration(o.flush), load_before,
      zpipe::bench::LoadAverage());
  std::cout << absl::StrFormat("%7s %5s %7s %5s %6s %5s %17s %15s %15s %9s %13s %6s %7s\n",
                               "workers", "jobs", "CPU s", "cores", "RSS MB", "thr",
                               "hb sent p50/p99", "hb-path p50/p99", "GetJob p50/p99",
                               "events/s", "sched p50/max", "hb t/o", "ok");
  bool all_ok = true, goal_met = false;
  for (const Row& r : rows) {
    auto pair = [](const std::vector<double>& v, int decimals) {
      if (v.empty()) return std::string("n/a");
      return absl::StrFormat("%.*f/%.*f", decimals, Percentile(v, 0.5), decimals,
                             Percentile(v, 0.99));
    };
    auto sched = r.schedule_s.empty()
                     ? std::string("n/a")
                     : absl::StrFormat("%.2f/%.2f s", Percentile(r.schedule_s, 0.5),
                                       Percentile(r.schedule_s, 1.0));
    std::cout << absl::StrFormat(
        "%7d %5d %7.1f %5.2f %6.0f %5ld %17s %15s %15s %9.0f %13s %6d %3d/%-3d\n", r.workers,
        r.jobs, r.cpu_s, r.wall_s > 0 ? r.cpu_s / r.wall_s : 0.0, r.rss_peak_kb / 1024.0,
        r.threads_peak, pair(r.heartbeat_write_ms, 0) + " ms",
        pair(r.ping_ms, 1) + " ms", pair(r.getjob_ms, 1) + " ms", r.events_per_s, sched,
        std::max(r.declared_dead, r.sessions_ended_early), r.jobs_succeeded, r.jobs);
    if (!r.error.empty()) std::cout << "   " << r.workers << " workers: " << r.error << "\n";
    if (r.first_early_end_s) {
      std::cout << absl::StrFormat(
          "%*s the first session the coordinator ended: %.1f s after the last submit (measured "
          "window: %.1f .. %.1f s)\n",
          7, "", *r.first_early_end_s, r.window_from_s, r.window_to_s);
    }
    if (r.workers_with_backlog > 0) {
      std::cout << absl::StrFormat(
          "%*s %d live workers still had messages the coordinator had not taken when the jobs "
          "had ended (oldest due %.1f s before)\n",
          7, "", r.workers_with_backlog, r.oldest_backlog_s);
    }
    const bool ok = r.error.empty() && r.declared_dead == 0 && r.sessions_ended_early == 0 &&
                    r.jobs_succeeded == r.jobs;
    all_ok = all_ok && ok;
    if (r.workers >= 4096 && r.jobs >= 256 && ok && !r.getjob_ms.empty() &&
        Percentile(r.getjob_ms, 0.99) < 50 && r.rss_peak_kb >= 0 && r.rss_peak_kb < 2L << 20) {
      goal_met = true;
    }
    std::cout << absl::StrFormat(
        "%*s %.0f messages/s from the workers; generator: %.1f CPU s, heartbeats due late by "
        "%.2f s at most (timeout 10 s)\n",
        7, "", r.messages_per_s, r.generator_cpu_s, r.max_heartbeat_late_s);
  }
  std::cout << "goal (4,096 workers, 256 running jobs: GetJob p99 < 50 ms, RSS < 2 GB, no "
               "heartbeat timeout, every job succeeded): "
            << (goal_met ? "met" : "NOT met") << "\n"
            << "CPU s / cores: coordinator CPU over the whole run (register .. every job ended); "
               "RSS: peak (VmHWM); thr: peak threads;\nhb sent: a heartbeat's due time -> its "
               "write done (behind the stream's earlier messages, under HTTP/2 flow "
               "control);\nhb-path: a unary WorkerService call on the workers' connections "
               "(heartbeats are not acknowledged);\nhb t/o: workers the coordinator declared "
               "dead (sessions it ended; its list of dead workers is capped by "
               "--max-dead-workers);\nsched: submit -> every rank assigned\n";
  return o.check && !all_ok ? 1 : 0;
}
