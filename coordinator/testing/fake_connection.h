// FakeConnection: a WorkerConnection for unit tests that records what a worker would receive.
#ifndef ZPIPE_COORDINATOR_TESTING_FAKE_CONNECTION_H_
#define ZPIPE_COORDINATOR_TESTING_FAKE_CONNECTION_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/worker_connection.h"

namespace zpipe::coordinator {

class FakeConnection : public WorkerConnection {
 public:
  void Send(WorkerCommand command) override { commands.push_back(std::move(command)); }
  void Close(absl::Status status) override { closed = std::move(status); }
  std::vector<WorkerCommand> commands;
  absl::Status closed;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_TESTING_FAKE_CONNECTION_H_
