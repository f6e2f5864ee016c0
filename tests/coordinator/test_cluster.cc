#include "tests/coordinator/test_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/plan.h"
#include "gtest/gtest.h"
#include "tests/support/compute_progress.h"
#include "util/log.h"

namespace zpipe::testing {

std::unique_ptr<coordinator::CoordinatorServer> StartCoordinator(const std::string& db,
                                                                 absl::Duration heartbeat_timeout) {
  coordinator::ServerOptions options;
  options.db = db;
  options.heartbeat_timeout = heartbeat_timeout;
  options.recovery_grace = heartbeat_timeout;  // tests wait no longer than that for workers
  return StartCoordinator(std::move(options));
}

std::unique_ptr<coordinator::CoordinatorServer> StartCoordinator(
    coordinator::ServerOptions options) {
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  auto server = coordinator::CoordinatorServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::shared_ptr<grpc::Channel> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

void AddToken(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

std::string RandomHex() {
  static absl::Mutex mu;
  static absl::BitGen gen;
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

v1::JobSpec SyntheticSpec(int p, int m, int iterations, int d) {
  v1::JobSpec spec;
  spec.set_name("test-job");
  auto* s = spec.mutable_model()->mutable_synthetic();
  s->set_forward_ms(1);
  s->set_backward_ms(1);
  s->set_weight_ms(1);
  s->set_activation_kb(64);
  s->set_params_mb(10);
  spec.mutable_parallel()->set_pipeline(p);
  spec.mutable_parallel()->set_data(d);
  spec.mutable_schedule()->set_kind("1f1b");
  spec.mutable_batch()->set_microbatches(m);
  spec.mutable_batch()->set_microbatch_size(1);
  spec.mutable_train()->set_iterations(iterations);
  spec.mutable_train()->set_optimizer("adamw");
  spec.mutable_train()->set_lr(1e-3);
  spec.mutable_train()->set_seed(1);
  spec.set_device(v1::DEVICE_KIND_CPU);
  return spec;
}

TestWorker::TestWorker(int port, Options options)
    : port_(port), options_(std::move(options)), stub_(v1::WorkerService::NewStub(Connect(port))) {
  if (options_.instance_id.empty()) options_.instance_id = RandomHex();
}

TestWorker::~TestWorker() { Stop(); }

bool TestWorker::Start() {
  v1::RegisterWorkerRequest req;
  req.set_name(options_.name);
  req.set_device_kind(options_.device);
  req.set_device_index(0);
  req.set_host("127.0.0.1");
  req.set_memory_bytes(1 << 30);
  req.set_running_job_id(options_.running_job_id);
  req.set_running_pipeline_rank(options_.running_pipeline_rank);
  req.set_running_data_rank(options_.running_data_rank);
  req.set_instance_id(options_.instance_id);
  v1::RegisterWorkerResponse resp;
  grpc::ClientContext ctx;
  AddToken(ctx, options_.token);
  grpc::Status st = stub_->RegisterWorker(&ctx, req, &resp);
  if (!st.ok()) {
    absl::MutexLock lock(&mu_);
    last_error_ = st;
    return false;
  }
  worker_id_ = resp.worker_id();
  resumed_ = resp.resume_running_job();
  heartbeat_interval_ = absl::Seconds(resp.heartbeat_interval().seconds()) +
                        absl::Nanoseconds(resp.heartbeat_interval().nanos());
  AddToken(ctx_, options_.token);
  stream_ = stub_->Session(&ctx_);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id(worker_id_);
  hello.mutable_hello()->set_instance_id(options_.instance_id);
  if (!Write(hello)) return false;
  reader_ = std::thread([this] { ReadLoop(); });
  heartbeater_ = std::thread([this] { HeartbeatLoop(); });
  return true;
}

void TestWorker::Stop() {
  if (stopping_.exchange(true)) return;
  stopped_.Notify();
  if (stream_) ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();  // no new runners after this
  for (auto& t : runners_) t.join();
  if (heartbeater_.joinable()) heartbeater_.join();
}

bool TestWorker::Write(const v1::WorkerMessage& message) {
  absl::MutexLock lock(&write_mu_);
  return stream_->Write(message);
}

void TestWorker::ReadLoop() {
  v1::CoordinatorMessage msg;
  while (stream_->Read(&msg)) {
    if (msg.has_assignment()) {
      {
        absl::MutexLock lock(&mu_);
        assignments_.push_back(msg.assignment());
      }
      if (options_.auto_run) {
        v1::Assignment a = msg.assignment();
        absl::MutexLock lock(&mu_);
        runners_.emplace_back([this, a] { Execute(a); });
      }
    } else if (msg.has_cancel()) {
      absl::MutexLock lock(&mu_);
      cancels_.push_back(msg.cancel());
      cancelled_jobs_.push_back(msg.cancel().job_id());
    }
  }
  absl::MutexLock lock(&mu_);
  last_error_ = stream_->Finish();
}

void TestWorker::HeartbeatLoop() {
  while (!stopped_.WaitForNotificationWithTimeout(heartbeat_interval_)) {
    if (!heartbeats_) continue;
    v1::WorkerMessage hb;
    hb.mutable_heartbeat()->set_job_id("");
    Write(hb);
  }
}

void TestWorker::Execute(const v1::Assignment& a) {
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(a.plan_text());
  if (!plan.ok()) {
    ADD_FAILURE() << "assignment plan does not parse: " << plan.status();
    return;
  }
  auto cancelled = [&] {
    absl::MutexLock lock(&mu_);
    return stopping_ || std::find(cancelled_jobs_.begin(), cancelled_jobs_.end(), a.job_id()) !=
                            cancelled_jobs_.end();
  };
  const int p = a.pipeline_size();
  for (int it = 0; it < a.spec().train().iterations(); ++it) {
    if (cancelled()) return;
    v1::WorkerMessage batch;
    v1::ProgressBatch* b = batch.mutable_progress();
    b->set_job_id(a.job_id());
    b->set_pipeline_rank(a.pipeline_rank());
    b->set_data_rank(a.data_rank());
    AddComputeProgress(plan->ranks[a.pipeline_rank()], it, b);
    if (!Write(batch)) return;
    v1::WorkerMessage report;
    v1::IterationReport* r = report.mutable_iteration();
    r->set_job_id(a.job_id());
    r->set_iteration(it);
    v1::RankIterationStats* s = r->mutable_stats();
    s->set_pipeline_rank(a.pipeline_rank());
    s->set_data_rank(a.data_rank());
    s->set_duration_s(0.010);
    s->set_busy_s(0.008);
    s->set_idle_s(0.002);
    s->set_bubble_ratio(0.2);
    if (a.pipeline_rank() == p - 1) r->set_loss(5.0 - 0.1 * it);
    if (!Write(report)) return;
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (!cancelled()) SendFinished(a.job_id(), a.pipeline_rank(), a.data_rank());
}

void TestWorker::SendFinished(const std::string& job_id, int pipeline_rank, int data_rank) {
  v1::WorkerMessage done;
  done.mutable_finished()->set_job_id(job_id);
  done.mutable_finished()->set_pipeline_rank(pipeline_rank);
  done.mutable_finished()->set_data_rank(data_rank);
  Write(done);
}

void TestWorker::SendLog(const std::string& job_id, int pipeline_rank, int data_rank,
                         const std::vector<std::string>& lines) {
  v1::WorkerMessage log;
  v1::JobLogBatch* batch = log.mutable_log();
  batch->set_job_id(job_id);
  batch->set_pipeline_rank(pipeline_rank);
  batch->set_data_rank(data_rank);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  for (const std::string& text : lines) {
    v1::LogLine* line = batch->add_lines();
    line->mutable_time()->set_seconds(now);
    line->set_text(text);
  }
  Write(log);
}

void TestWorker::SendFailure(const std::string& job_id, int pipeline_rank, int data_rank,
                             const std::string& message) {
  v1::WorkerMessage failure;
  failure.mutable_failure()->set_job_id(job_id);
  failure.mutable_failure()->set_pipeline_rank(pipeline_rank);
  failure.mutable_failure()->set_data_rank(data_rank);
  failure.mutable_failure()->set_message(message);
  Write(failure);
}

bool TestWorker::WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

std::vector<v1::Assignment> TestWorker::assignments() const {
  absl::MutexLock lock(&mu_);
  return assignments_;
}

std::vector<v1::CancelAssignment> TestWorker::cancels() const {
  absl::MutexLock lock(&mu_);
  return cancels_;
}

grpc::Status TestWorker::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

v1::Job WaitForState(v1::CoordinatorService::Stub& stub, const std::string& job_id,
                     v1::JobState state, absl::Duration timeout, const std::string& token) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::Job job;
  while (true) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    grpc::Status st = stub.GetJob(&ctx, req, &job);
    if (st.ok() && job.state() == state) return job;
    if (absl::Now() > deadline) return job;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

}  // namespace zpipe::testing
