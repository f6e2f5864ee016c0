// A test worker built on the real worker-facing API (WorkerService): registers, holds a Session
// stream with heartbeats, and on an assignment either "runs" the job (reports progress for every
// compute action of its rank's plan, an iteration report per iteration, then RankFinished) or
// holds it until cancelled. Threads in the test process stand in for the worker daemon.
#ifndef ZPIPE_TESTS_CLI_FAKE_WORKER_H_
#define ZPIPE_TESTS_CLI_FAKE_WORKER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zpipe::testing {

struct FakeWorkerOptions {
  std::string name;
  int device_index = 0;
  // kRun: execute assignments at `iteration_time` per iteration. kHold: accept them and wait.
  enum class Mode { kRun, kHold } mode = Mode::kRun;
  absl::Duration iteration_time = absl::Milliseconds(20);
};

class FakeWorker {
 public:
  FakeWorker(std::string coordinator_address, FakeWorkerOptions options);
  ~FakeWorker();  // Stop()

  // Registers and opens the session. Returns the registration error, if any.
  absl::Status Start();
  // Closes the session and joins every thread. Idempotent.
  void Stop();

  int assignments() const;  // assignments received so far
  int cancels() const;      // CancelAssignment messages received so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_CLI_FAKE_WORKER_H_
