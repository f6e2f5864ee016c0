// A real zpipe-coordinator and real zpipe-worker processes on loopback, for end-to-end tests.
#ifndef ZPIPE_TESTS_SUPPORT_LOCAL_CLUSTER_H_
#define ZPIPE_TESTS_SUPPORT_LOCAL_CLUSTER_H_

#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/cli/subprocess.h"

namespace zpipe::testing {

// Polls the coordinator behind `client` until at least `n` workers are IDLE; false on timeout.
inline bool WaitForIdleWorkers(Client& client, int n, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto workers = client.Workers();
    if (workers.ok()) {
      int idle = 0;
      for (const auto& w : *workers) idle += w.state() == v1::WORKER_STATE_IDLE;
      if (idle >= n) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

struct LocalClusterOptions {
  std::string coordinator_bin;
  std::string worker_bin;
  std::string heartbeat_timeout = "3s";
  std::string comm_timeout_s = "10";  // worker --comm-timeout
  // Put before each worker's argv, e.g. a shell that sets resource limits and then runs
  // `exec "$@"` (see tests/worker/checkpoint_failure_e2e_test.cc).
  std::vector<std::string> worker_wrapper{};
  // Worker --data-root: tests keep job files and checkpoints under the temporary directory.
  std::vector<std::string> data_roots = {std::filesystem::temp_directory_path().string()};
  // The coordinator's --db: a file keeps jobs across RestartCoordinator().
  std::string db = ":memory:";
  std::vector<std::string> coordinator_args{};  // more flags
  std::vector<std::string> worker_args{};       // more flags for every worker
};

// The coordinator (in-memory database unless options.db, no /metrics) starts at construction,
// with `workers` workers named w0, w1, ...; everything is killed when the cluster goes away.
class LocalCluster {
 public:
  LocalCluster(int workers, LocalClusterOptions options) : options_(std::move(options)) {
    address_ = absl::StrCat("127.0.0.1:", FreePort());
    StartCoordinator();
    for (int i = 0; i < workers; ++i) AddWorker();
  }

  // Stops the coordinator with `sig` (SIGKILL: a crash) and waits for it to exit.
  void StopCoordinator(int sig) {
    coordinator_->Signal(sig);
    coordinator_->Wait(30);
  }
  // Starts a coordinator on the same address and database (and a fresh client for it).
  void StartCoordinator() {
    std::vector<std::string> argv = {options_.coordinator_bin,
                                     "--listen",
                                     address_,
                                     "--metrics-listen",
                                     "",
                                     "--db",
                                     options_.db,
                                     "--heartbeat-timeout",
                                     options_.heartbeat_timeout};
    argv.insert(argv.end(), options_.coordinator_args.begin(), options_.coordinator_args.end());
    coordinator_ = std::make_unique<Subprocess>(argv);
    client_ = Client::Create(address_);
  }
  Subprocess& coordinator() { return *coordinator_; }

  void AddWorker() {
    workers_.push_back(std::make_unique<Subprocess>(WorkerArgv(static_cast<int>(workers_.size()))));
  }
  // Starts worker i again (the same name and flags), e.g. after it was killed.
  void RestartWorker(int i) {
    workers_[i]->Signal(SIGKILL);
    workers_[i]->Wait(30);
    workers_[i] = std::make_unique<Subprocess>(WorkerArgv(i));
  }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Waits until at least `n` workers are IDLE.
  bool WaitIdle(int n, double timeout_s = 30) { return WaitForIdleWorkers(*client_, n, timeout_s); }

  absl::StatusOr<v1::Job> WaitTerminal(const std::string& id, double timeout_s = 120) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      auto job = client_->Get(id);
      if (!job.ok() && job.status().code() == absl::StatusCode::kUnavailable) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // coordinator restarting
        continue;
      }
      if (!job.ok()) return job.status();
      const auto s = job->state();
      if (s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
          s == v1::JOB_STATE_CANCELLED) {
        return job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::DeadlineExceededError("job did not finish");
  }

  Client& client() { return *client_; }
  const std::string& address() const { return address_; }
  Subprocess& worker(int i) { return *workers_[i]; }

 private:
  std::vector<std::string> WorkerArgv(int i) const {
    std::vector<std::string> argv = options_.worker_wrapper;
    const std::vector<std::string> worker = {options_.worker_bin,
                                             "--coordinator",
                                             address_,
                                             "--name",
                                             absl::StrCat("w", i),
                                             "--device",
                                             absl::StrCat("cpu:", i),
                                             "--comm-timeout",
                                             options_.comm_timeout_s};
    argv.insert(argv.end(), worker.begin(), worker.end());
    argv.insert(argv.end(), options_.worker_args.begin(), options_.worker_args.end());
    for (const std::string& root : options_.data_roots) {
      argv.push_back("--data-root");
      argv.push_back(root);
    }
    return argv;
  }

  LocalClusterOptions options_;
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<Client> client_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_SUPPORT_LOCAL_CLUSTER_H_
