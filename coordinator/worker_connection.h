// The coordinator's downstream channel to a worker: the commands a worker receives on its
// Session stream (assign a rank, switch plans, cancel, shut down, profile) and the connection they
// go out on. Worker-facing pieces (WorkerRegistry) and the job manager share these types; the gRPC
// worker service implements WorkerConnection.
#ifndef ZPIPE_COORDINATOR_WORKER_CONNECTION_H_
#define ZPIPE_COORDINATOR_WORKER_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"
#include "coordinator/planner.h"

namespace zpipe::coordinator {

// "Run rank (pipeline_rank, data_rank) of this job."
struct AssignmentData {
  std::string job_id;
  JobSpec spec;
  int attempt = 0;
  RankSlot self;
  int pipeline_size = 0;
  int data_size = 0;
  std::shared_ptr<const JobPlan> plan;
  std::vector<RankSlot> peers;  // by global rank
  std::string rendezvous_prefix;
  int start_iteration = 0;
};

struct WorkerCommand {
  enum class Kind { kAssign, kCancel, kShutdown, kProfile, kPlanUpdate };
  Kind kind = Kind::kAssign;
  // kAssign; kProfile: only job_id, spec and attempt are set.
  std::shared_ptr<const AssignmentData> assignment;
  std::string job_id;  // kCancel, kPlanUpdate
  // kPlanUpdate: run `plan` (its version) from `switch_iteration` on (PlanUpdate in worker.proto).
  int attempt = 0;
  std::shared_ptr<const JobPlan> plan;
  int switch_iteration = 0;
  std::string reason;  // kCancel, kShutdown
};

// The downstream half of a worker's Session stream, and what its upstream half has heard.
class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  // Queues a command; never blocks. Called with the job manager's lock held.
  virtual void Send(WorkerCommand command) = 0;
  // Ends the stream with `status` (e.g. the worker was replaced or declared dead).
  virtual void Close(absl::Status status) = 0;

  // Liveness kept without the jobs lock (WorkerRegistry::LastSeen reads it under that lock): the
  // session's reader marks each message it reads (Heard, at `now`) and when it is done handling
  // it (Handled). A worker whose message the coordinator is still handling is not silent: the
  // delay is the coordinator's (a handler waiting for the jobs lock reads nothing, heartbeats
  // included). Thread-safe.
  void Heard(absl::Time now) {
    heard_ns_.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
    handling_.store(true, std::memory_order_relaxed);
  }
  void Handled() { handling_.store(false, std::memory_order_relaxed); }
  // The last message's time (InfinitePast before any), or `now` while one is being handled.
  absl::Time LastHeard(absl::Time now) const {
    if (handling_.load(std::memory_order_relaxed)) return now;
    const int64_t ns = heard_ns_.load(std::memory_order_relaxed);
    return ns == kNever ? absl::InfinitePast() : absl::FromUnixNanos(ns);
  }
  // Heartbeats reach the job manager only when the job they name changes, unless the registry
  // changed its idea of that job (it cancelled one: the worker tears it down until a heartbeat
  // says otherwise) and wants the next heartbeat whatever it says. TakeHeartbeatWanted clears it.
  void WantHeartbeat() { heartbeat_wanted_.store(true, std::memory_order_release); }
  bool TakeHeartbeatWanted() { return heartbeat_wanted_.exchange(false, std::memory_order_acq_rel); }

 private:
  static constexpr int64_t kNever = INT64_MIN;
  std::atomic<int64_t> heard_ns_{kNever};
  std::atomic<bool> handling_{false};
  std::atomic<bool> heartbeat_wanted_{false};
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_CONNECTION_H_
