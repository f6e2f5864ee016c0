// Test harness for coordinator tests: an in-process coordinator on loopback and test workers
// (threads) that speak the real worker-facing gRPC API.
#ifndef ZPIPE_TESTS_COORDINATOR_TEST_CLUSTER_H_
#define ZPIPE_TESTS_COORDINATOR_TEST_CLUSTER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/server.h"
#include "grpcpp/grpcpp.h"
#include "zpipe/v1/coordinator.grpc.pb.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::testing {

// Starts a coordinator on 127.0.0.1:0 (and /metrics on 127.0.0.1:0).
std::unique_ptr<coordinator::CoordinatorServer> StartCoordinator(
    const std::string& db = ":memory:", absl::Duration heartbeat_timeout = absl::Seconds(10));

// The same with other options (limits, ...); listen and metrics_listen are set as above.
std::unique_ptr<coordinator::CoordinatorServer> StartCoordinator(
    coordinator::ServerOptions options);

std::shared_ptr<grpc::Channel> Connect(int port);

// Adds `authorization: Bearer TOKEN` to `ctx` unless `token` is empty.
void AddToken(grpc::ClientContext& ctx, const std::string& token);

// A random 32-hex-digit string (instance ids, tokens).
std::string RandomHex();

// A valid synthetic 1F1B spec: p pipeline ranks, m microbatches, `iterations` iterations.
v1::JobSpec SyntheticSpec(int p = 2, int m = 4, int iterations = 2, int d = 1);

// A worker: registers, holds a Session, heartbeats at the interval the coordinator asks for, and
// (when auto_run) executes each assignment by reporting progress for every compute action of its
// rank, an iteration report per iteration, and RankFinished.
class TestWorker {
 public:
  struct Options {
    Options(std::string name, v1::DeviceKind device = v1::DEVICE_KIND_CPU, bool auto_run = true)
        : name(std::move(name)), device(device), auto_run(auto_run) {}
    std::string name;
    v1::DeviceKind device;
    bool auto_run;
    // Set in RegisterWorkerRequest.running_job_* (reconnecting after a coordinator restart).
    std::string running_job_id;
    int running_pipeline_rank = 0;
    int running_data_rank = 0;
    // RegisterWorkerRequest.instance_id; empty = a fresh random one (a new process).
    std::string instance_id;
    // Sent as `authorization: Bearer TOKEN` on every call; empty = none.
    std::string token;
  };

  TestWorker(int port, Options options);
  ~TestWorker();  // Stop()

  // Registers and opens the session. False (with the status in last_error()) on failure.
  bool Start();
  void Stop();
  void StopHeartbeats() { heartbeats_ = false; }

  // Waits until `pred` holds on this worker's state (polled), up to `timeout`.
  bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10));

  std::vector<v1::Assignment> assignments() const;
  std::vector<v1::CancelAssignment> cancels() const;
  bool resumed() const { return resumed_; }
  const std::string& name() const { return options_.name; }
  const std::string& instance_id() const { return options_.instance_id; }
  grpc::Status last_error() const;

  // Runs an assignment as auto_run would (for workers that hold theirs).
  void Execute(const v1::Assignment& a);
  // Sends RankFinished without executing (e.g. after a reconnect).
  void SendFinished(const std::string& job_id, int pipeline_rank, int data_rank);
  void SendFailure(const std::string& job_id, int pipeline_rank, int data_rank,
                   const std::string& message);
  // Sends one JobLogBatch with `lines`, stamped now.
  void SendLog(const std::string& job_id, int pipeline_rank, int data_rank,
               const std::vector<std::string>& lines);

 private:
  void ReadLoop();
  void HeartbeatLoop();
  bool Write(const v1::WorkerMessage& message);

  const int port_;
  Options options_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::string worker_id_;
  absl::Duration heartbeat_interval_ = absl::Milliseconds(100);
  std::atomic<bool> heartbeats_{true};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> resumed_{false};
  absl::Notification stopped_;
  std::thread reader_, heartbeater_;
  std::vector<std::thread> runners_;
  mutable absl::Mutex mu_;
  absl::Mutex write_mu_;
  std::vector<v1::Assignment> assignments_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CancelAssignment> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancelled_jobs_ ABSL_GUARDED_BY(mu_);
  grpc::Status last_error_ ABSL_GUARDED_BY(mu_);
};

// Polls GetJob (with `token`, if any) until the job is in `state` (or `timeout`); returns the last
// Job seen.
v1::Job WaitForState(v1::CoordinatorService::Stub& stub, const std::string& job_id,
                     v1::JobState state, absl::Duration timeout = absl::Seconds(10),
                     const std::string& token = "");

// Blocking HTTP GET of http://127.0.0.1:port/path; returns the body ("" on failure).
std::string HttpGet(int port, const std::string& path);

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_COORDINATOR_TEST_CLUSTER_H_
