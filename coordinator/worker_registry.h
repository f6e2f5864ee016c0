// WorkerRegistry: the coordinator's table of workers and their liveness, knowing nothing of job
// scheduling. It holds one entry per worker name (WorkerInfo + the Session stream it is attached
// to), hands out registration ids, checks names and capabilities, and moves a worker between
// IDLE, BUSY and DEAD when told to; which job a worker runs is decided elsewhere (JobLifecycle)
// and recorded here by job id and rank only.
//
// Liveness: a worker is seen when it registers, attaches or heartbeats through the registry
// (info.last_seen) and whenever its session reads a message from it (WorkerConnection::Heard,
// kept without the jobs lock; LastSeen combines both). A worker silent for longer than the
// heartbeat timeout is due to be declared dead (SilentWorkers); declaring it dead closes its
// stream and returns the job id it held, for the caller to deal with. A worker whose stream ends
// keeps a BUSY rank until then, so it can reconnect; an IDLE one is dead at once. Dead workers
// stay listed for WorkerLimits::dead_retention, then are forgotten (ForgetDead).
//
// Not thread-safe: the owner serializes every call (JobLifecycle guards it with its lock). The
// WorkerConnection pointers are borrowed: valid from Attach until Detach or until the registry
// closes them (replacement, death).
//
// Bounded (WorkerLimits): at most max_workers live workers (a registration under a new name beyond
// that is refused), at most max_dead_workers dead ones remembered (the longest dead forgotten
// first), each at most dead_retention; so a flood of registrations under new names cannot grow
// the coordinator without bound.
#ifndef ZPIPE_COORDINATOR_WORKER_REGISTRY_H_
#define ZPIPE_COORDINATOR_WORKER_REGISTRY_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/domain.h"
#include "coordinator/worker_connection.h"

namespace zpipe::coordinator {

// "worker w1 (pipeline rank 1, data rank 0)": how reasons and logs name a rank.
std::string RankName(const std::string& worker, int pipeline_rank, int data_rank);

// A registered worker: what clients see, and its Session stream (null while none is attached).
struct RegisteredWorker {
  WorkerInfo info;
  WorkerConnection* connection = nullptr;
};

// The coordinator's --max-workers, --max-dead-workers and --dead-worker-retention.
struct WorkerLimits {
  int max_workers = 10000;
  int max_dead_workers = 1000;
  absl::Duration dead_retention = absl::Minutes(15);
};

// One page of a listing by name: `workers`, and the token for the next page ("" = the last).
struct WorkerPage {
  std::vector<WorkerInfo> workers;
  std::string next_page_token;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(WorkerLimits limits = {}) : limits_(limits) {}

  // InvalidArgument naming the field when a registration is malformed or too large to keep.
  static absl::Status Validate(const WorkerRegistration& registration);

  // When `w` was last heard from (see Liveness above); `now` while its session handles a message.
  static absl::Time LastSeen(const RegisteredWorker& w, absl::Time now);

  // AlreadyExists while another connected, live worker holds the name, unless `registration`
  // carries that worker's instance_id (the same process reconnecting).
  absl::Status CheckNameFree(const WorkerRegistration& registration) const;
  // ResourceExhausted, naming --max-workers, when `registration` would be a new live worker (its
  // name not held by a live one) while max_workers are live.
  absl::Status CheckCapacity(const WorkerRegistration& registration) const;
  // Replaces any entry of the same name (closing its stream with Aborted) by a new IDLE one with a
  // fresh id, registered and last seen at `now`. It reports `running_job_id` as still running
  // (being torn down) unless `running_job_finished`. Valid until the next call that adds or
  // removes workers.
  RegisteredWorker& Add(const WorkerRegistration& registration, absl::Time now);

  // Binds a stream to registration `worker_id` (closing another stream bound before). NotFound
  // for an unknown id; PermissionDenied when the registration has an instance_id and
  // `instance_id` differs; FailedPrecondition when the worker was declared dead.
  absl::Status Attach(const std::string& worker_id, const std::string& instance_id,
                      WorkerConnection* connection, absl::Time now);
  // Unbinds `connection` if it is the worker's current stream: an IDLE worker becomes DEAD, a
  // BUSY one keeps its rank. Returns the worker, or null when nothing changed.
  RegisteredWorker* Detach(const std::string& worker_id, WorkerConnection* connection);
  // Refreshes the worker and records the job it says it runs ("" = none; kept to 256 chars).
  // Aborted when `worker_id` is not a current, live registration. `*torn_down` is set when an
  // IDLE worker has just stopped reporting a job (it may be what a waiting job needs).
  absl::Status Heartbeat(const std::string& worker_id, const std::string& running_job,
                         absl::Time now, bool* torn_down);

  // Declares the worker DEAD with `reason`, closing its stream with Unavailable. Returns the id
  // of the job it was BUSY with ("" = none); the worker keeps its rank numbers for the message.
  std::string MarkDead(RegisteredWorker& worker, const std::string& reason);
  // Live workers silent for longer than `timeout` at `now`, by name.
  std::vector<RegisteredWorker*> SilentWorkers(absl::Time now, absl::Duration timeout);
  // Forgets workers dead for longer than dead_retention, and the longest dead beyond
  // max_dead_workers.
  void ForgetDead(absl::Time now);

  // The worker takes rank (pipeline_rank, data_rank) of `job_id`: BUSY.
  static void Reserve(RegisteredWorker& worker, const std::string& job_id, int pipeline_rank,
                      int data_rank);
  // Every named worker still BUSY with `job_id` is released: sent a kCancel with `reason` first
  // when `cancel` (and then reports the job until a heartbeat says it is torn down), IDLE when its
  // stream is attached, DEAD otherwise.
  void Release(const std::string& job_id, const std::vector<std::string>& worker_names, bool cancel,
               const std::string& reason);
  // Connected, IDLE workers not tearing a job down that can run `device` jobs, by name; and in
  // `live` (when not null) the registrations of every live worker.
  std::vector<RegisteredWorker*> IdleFor(DeviceKind device,
                                         std::vector<const WorkerRegistration*>* live);

  // Why the named worker does not run `job_id` ("lost: ...", naming the rank `slot`), or nullopt
  // when it is live, attached and BUSY with it.
  std::optional<std::string> WhyNotRunning(const RankSlot& slot, const std::string& job_id) const;
  // FailedPrecondition unless the worker is BUSY with exactly that rank of `job_id`.
  static absl::Status CheckRank(const RegisteredWorker& worker, const std::string& job_id,
                                int pipeline_rank, int data_rank);
  // Whether the named worker is the one holding that rank of `job_id` (reports from others are
  // stale).
  bool HoldsRank(const std::string& worker_name, const std::string& job_id, int pipeline_rank,
                 int data_rank) const;

  RegisteredWorker* ById(const std::string& worker_id);
  RegisteredWorker* ByName(const std::string& name);
  const RegisteredWorker* ByName(const std::string& name) const;
  // The name of the live worker registered with `instance_id` (non-empty), if any.
  std::optional<std::string> NameByInstance(const std::string& instance_id) const;
  // NotFound for an unknown id.
  absl::StatusOr<std::string> NameOf(const std::string& worker_id) const;
  std::vector<WorkerInfo> List(bool include_dead) const;
  // Up to `page_size` (>= 1) workers by name, after `page_token` ("" = from the first). The
  // token is a cursor, the last name of the previous page, so a page stays right while workers
  // come and go.
  WorkerPage ListPage(bool include_dead, int page_size, const std::string& page_token) const;
  // Workers per WorkerState (indexed by its value).
  std::array<int64_t, 3> CountByState() const;

 private:
  const WorkerLimits limits_;
  std::map<std::string, RegisteredWorker> workers_;            // by name
  absl::flat_hash_map<std::string, std::string> names_by_id_;  // worker_id -> name
  uint64_t next_id_ = 1;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_REGISTRY_H_
