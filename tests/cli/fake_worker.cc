#include "tests/cli/fake_worker.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "tests/support/compute_progress.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::testing {

struct FakeWorker::State {
  std::string address;
  FakeWorkerOptions options;
  std::unique_ptr<v1::WorkerService::Stub> stub;
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
  std::mutex write_mu;  // one writer at a time on the stream
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::string running_job;  // guarded by mu; cleared by a cancel
  std::atomic<int> assignments{0};
  std::atomic<int> cancels{0};
  absl::Duration heartbeat_interval = absl::Seconds(1);
  std::thread reader, heartbeat;
  std::vector<std::thread> runners;
  bool started = false;

  bool Write(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu);
    return stream->Write(m);
  }

  bool StillRunning(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu);
    return !stopping && running_job == job;
  }

  void RunAssignment(v1::Assignment a) {
    if (options.mode == FakeWorkerOptions::Mode::kHold) return;
    absl::StatusOr<core::Plan> plan = core::ParsePlanText(a.plan_text());
    if (!plan.ok() || a.pipeline_rank() >= static_cast<int>(plan->ranks.size())) {
      v1::WorkerMessage m;
      v1::RankFailure* f = m.mutable_failure();
      f->set_job_id(a.job_id());
      f->set_pipeline_rank(a.pipeline_rank());
      f->set_data_rank(a.data_rank());
      f->set_message(
          absl::StrCat("fake worker could not parse the plan: ", plan.status().message()));
      Write(m);
      return;
    }
    const std::vector<core::Action>& actions = plan->ranks[a.pipeline_rank()];
    const int iterations = a.spec().train().iterations();
    for (int it = a.start_iteration(); it < iterations; ++it) {
      v1::WorkerMessage m;
      v1::ProgressBatch* batch = m.mutable_progress();
      batch->set_job_id(a.job_id());
      batch->set_pipeline_rank(a.pipeline_rank());
      batch->set_data_rank(a.data_rank());
      AddComputeProgress(actions, it, batch);
      // Pace the iteration like a real one, then report its compute actions.
      absl::SleepFor(options.iteration_time);
      if (!StillRunning(a.job_id()) || !Write(m)) return;
      v1::WorkerMessage report;
      *report.mutable_iteration() =
          MakeIterationReport(a.job_id(), it, a.pipeline_rank(), a.data_rank(),
                              a.pipeline_size(), absl::ToDoubleSeconds(options.iteration_time));
      if (!StillRunning(a.job_id()) || !Write(report)) return;
    }
    v1::WorkerMessage done;
    done.mutable_finished()->set_job_id(a.job_id());
    done.mutable_finished()->set_pipeline_rank(a.pipeline_rank());
    done.mutable_finished()->set_data_rank(a.data_rank());
    if (StillRunning(a.job_id())) Write(done);
    std::lock_guard<std::mutex> lock(mu);
    if (running_job == a.job_id()) running_job.clear();
  }

  void ReadLoop() {
    v1::CoordinatorMessage m;
    while (stream->Read(&m)) {
      if (m.has_assignment()) {
        ++assignments;
        std::lock_guard<std::mutex> lock(mu);
        running_job = m.assignment().job_id();
        runners.emplace_back([this, a = m.assignment()] { RunAssignment(a); });
      } else if (m.has_cancel()) {
        ++cancels;
        std::lock_guard<std::mutex> lock(mu);
        if (running_job == m.cancel().job_id()) running_job.clear();
      } else if (m.has_shutdown()) {
        break;
      }
    }
  }

  void HeartbeatLoop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      cv.wait_for(lock, absl::ToChronoNanoseconds(heartbeat_interval));
      if (stopping) break;
      v1::WorkerMessage m;
      m.mutable_heartbeat()->set_job_id(running_job);
      lock.unlock();
      Write(m);
      lock.lock();
    }
  }
};

FakeWorker::FakeWorker(std::string coordinator_address, FakeWorkerOptions options)
    : state_(std::make_unique<State>()) {
  state_->address = std::move(coordinator_address);
  state_->options = std::move(options);
  state_->stub = v1::WorkerService::NewStub(
      grpc::CreateChannel(state_->address, grpc::InsecureChannelCredentials()));
}

FakeWorker::~FakeWorker() { Stop(); }

absl::Status FakeWorker::Start() {
  State& s = *state_;
  v1::RegisterWorkerRequest req;
  req.set_name(s.options.name);
  req.set_device_kind(v1::DEVICE_KIND_CPU);
  req.set_device_index(s.options.device_index);
  req.set_host("127.0.0.1");
  req.set_memory_bytes(8ull << 30);
  req.set_version("fake");
  v1::RegisterWorkerResponse resp;
  grpc::ClientContext reg_ctx;
  reg_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status st = s.stub->RegisterWorker(&reg_ctx, req, &resp);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
  }
  if (resp.has_heartbeat_interval()) {
    s.heartbeat_interval = absl::Seconds(resp.heartbeat_interval().seconds()) +
                           absl::Nanoseconds(resp.heartbeat_interval().nanos());
    if (s.heartbeat_interval <= absl::ZeroDuration()) s.heartbeat_interval = absl::Seconds(1);
  }
  s.ctx = std::make_unique<grpc::ClientContext>();
  s.stream = s.stub->Session(s.ctx.get());
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id(resp.worker_id());
  if (!s.Write(hello)) return absl::UnavailableError("session closed before hello");
  s.started = true;
  s.reader = std::thread([&s] { s.ReadLoop(); });
  s.heartbeat = std::thread([&s] { s.HeartbeatLoop(); });
  return absl::OkStatus();
}

void FakeWorker::Stop() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
  }
  s.cv.notify_all();
  if (!s.started) return;
  if (s.heartbeat.joinable()) s.heartbeat.join();
  std::vector<std::thread> runners;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    runners.swap(s.runners);
  }
  for (std::thread& t : runners) t.join();
  {
    std::lock_guard<std::mutex> lock(s.write_mu);
    s.stream->WritesDone();
  }
  s.ctx->TryCancel();
  if (s.reader.joinable()) s.reader.join();
  // Runners started between the swap and the reader's exit.
  for (std::thread& t : s.runners) t.join();
  s.stream->Finish();
}

int FakeWorker::assignments() const { return state_->assignments; }
int FakeWorker::cancels() const { return state_->cancels; }

}  // namespace zpipe::testing
