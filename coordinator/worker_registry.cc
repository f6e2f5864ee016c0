// WorkerRegistry: registrations, sessions, heartbeats and worker states.
#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/worker_match.h"
#include "util/log.h"

namespace zpipe::coordinator {
namespace {

// Capabilities are shown to every client and kept per worker: bound what one may cost.
absl::Status CheckCapabilities(const WorkerCapabilities& c) {
  constexpr size_t kMaxVersion = 64, kMaxName = 256, kMaxError = 1024, kMaxDevices = 64;
  for (const auto& [field, value] : {std::pair{"libtorch_version", &c.libtorch_version},
                                     {"cuda_runtime_version", &c.cuda_runtime_version},
                                     {"nccl_version", &c.nccl_version}}) {
    if (value->size() > kMaxVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("capabilities.", field, ": at most ", kMaxVersion, " characters"));
    }
  }
  if (c.probe_error.size() > kMaxError) {
    return absl::InvalidArgumentError(
        absl::StrCat("capabilities.probe_error: at most ", kMaxError, " characters"));
  }
  if (c.cuda_device_count < 0) {
    return absl::InvalidArgumentError("capabilities.cuda_device_count: must be >= 0");
  }
  if (c.devices.size() > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("capabilities.devices: at most ", kMaxDevices, " devices"));
  }
  for (const CudaDeviceInfo& d : c.devices) {
    if (d.name.size() > kMaxName) {
      return absl::InvalidArgumentError(
          absl::StrCat("capabilities.devices.name: at most ", kMaxName, " characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRegistration(const WorkerRegistration& r) {
  if (r.name.empty() || r.name.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1..128 characters, got ", r.name.size()));
  }
  for (char c : r.name) {
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '/')) {
      return absl::InvalidArgumentError("name: may only contain A-Z, a-z, 0-9 and . _ - : /");
    }
  }
  if (r.device_index < 0) return absl::InvalidArgumentError("device_index: must be >= 0");
  if (r.host.size() > 256) return absl::InvalidArgumentError("host: at most 256 characters");
  if (r.version.size() > 256) return absl::InvalidArgumentError("version: at most 256 characters");
  if (r.instance_id.size() > 128) {
    return absl::InvalidArgumentError("instance_id: at most 128 characters");
  }
  if (r.capabilities) return CheckCapabilities(*r.capabilities);
  return absl::OkStatus();
}

}  // namespace

std::string RankName(const std::string& worker, int pipeline_rank, int data_rank) {
  return absl::StrCat("worker ", worker, " (pipeline rank ", pipeline_rank, ", data rank ",
                      data_rank, ")");
}

absl::Status WorkerRegistry::Validate(const WorkerRegistration& registration) {
  return CheckRegistration(registration);
}

absl::Status WorkerRegistry::CheckNameFree(const WorkerRegistration& reg) const {
  // One live worker per name: a second process with the same --name must not evict the first
  // (each would evict the other forever, failing every job on them). The holder's own process
  // reconnecting proves itself with its instance_id; a crashed or restarted one has no stream.
  auto it = workers_.find(reg.name);
  if (it == workers_.end()) return absl::OkStatus();
  const WorkerInfo& held = it->second.info;
  const bool same_process =
      !reg.instance_id.empty() && reg.instance_id == held.registration.instance_id;
  if (it->second.connection != nullptr && held.state != WorkerState::kDead && !same_process) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker name '", reg.name, "' is held by a connected worker (",
        DeviceKindName(held.registration.device_kind), ":", held.registration.device_index, " on ",
        held.registration.host.empty() ? "?" : held.registration.host, ", registered ",
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", held.register_time, absl::UTCTimeZone()),
        "); give this worker another --name, or stop that one (a restarted worker takes its name "
        "back once the old session is gone)"));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::CheckCapacity(const WorkerRegistration& reg) const {
  if (auto it = workers_.find(reg.name);
      it != workers_.end() && it->second.info.state != WorkerState::kDead) {
    return absl::OkStatus();  // replaces a live worker: no more live ones than before
  }
  int live = 0;
  for (const auto& [name, w] : workers_) live += w.info.state != WorkerState::kDead;
  if (live < limits_.max_workers) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the coordinator has ", live, " live workers, its limit (--max-workers ",
      limits_.max_workers, "): worker '", reg.name,
      "' is refused; stop workers that should not be here, or raise --max-workers"));
}

RegisteredWorker& WorkerRegistry::Add(const WorkerRegistration& reg, absl::Time now) {
  if (auto it = workers_.find(reg.name); it != workers_.end()) {
    RegisteredWorker& old = it->second;
    if (old.connection != nullptr) {
      old.connection->Close(absl::AbortedError("worker re-registered under the same name"));
    }
    names_by_id_.erase(old.info.worker_id);
    workers_.erase(it);
  }
  RegisteredWorker entry;
  entry.info.registration = reg;
  entry.info.worker_id = absl::StrCat("w", next_id_++, "-", reg.name);
  entry.info.state = WorkerState::kIdle;
  entry.info.register_time = now;
  entry.info.last_seen = now;
  // A job it claims and is not given back is being torn down until a heartbeat says otherwise.
  if (!reg.running_job_finished) entry.info.reported_job = reg.running_job_id;
  names_by_id_[entry.info.worker_id] = reg.name;
  return workers_[reg.name] = std::move(entry);
}

absl::Time WorkerRegistry::LastSeen(const RegisteredWorker& w, absl::Time now) {
  if (w.connection == nullptr) return w.info.last_seen;
  return std::max(w.info.last_seen, w.connection->LastHeard(now));
}

namespace {
// A copy of `w`'s info for a listing, its last_seen including what its session heard.
WorkerInfo Listed(const RegisteredWorker& w) {
  WorkerInfo info = w.info;
  info.last_seen = WorkerRegistry::LastSeen(w, absl::InfinitePast());
  return info;
}
}  // namespace

absl::Status WorkerRegistry::Attach(const std::string& worker_id, const std::string& instance_id,
                                    WorkerConnection* connection, absl::Time now) {
  RegisteredWorker* w = ById(worker_id);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("worker_id '", worker_id, "' is unknown or was replaced; register again"));
  }
  const std::string& registered = w->info.registration.instance_id;
  if (!registered.empty() && instance_id != registered) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker_id '", worker_id, "' was registered by another worker process (instance_id)"));
  }
  if (w->info.state == WorkerState::kDead) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", w->info.registration.name,
                                                      " was declared dead (", w->info.reason,
                                                      "); register again"));
  }
  if (w->connection != nullptr && w->connection != connection) {
    w->connection->Close(absl::AbortedError("another session attached for this worker"));
  }
  w->connection = connection;
  w->info.connected = true;
  w->info.last_seen = now;
  LogInfo("worker ", w->info.registration.name, ": session open");
  return absl::OkStatus();
}

RegisteredWorker* WorkerRegistry::Detach(const std::string& worker_id,
                                         WorkerConnection* connection) {
  RegisteredWorker* w = ById(worker_id);
  if (w == nullptr || w->connection != connection) return nullptr;
  w->info.last_seen = LastSeen(*w, absl::InfinitePast());  // what the session heard outlives it
  w->connection = nullptr;
  w->info.connected = false;
  if (w->info.state == WorkerState::kIdle) {
    w->info.state = WorkerState::kDead;
    w->info.reason = "session stream closed";
  }
  LogInfo("worker ", w->info.registration.name, ": session closed",
          w->info.state == WorkerState::kBusy
              ? absl::StrCat("; holds job ", w->info.job_id, " until the heartbeat timeout")
              : "");
  return w;
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id, const std::string& running_job,
                                       absl::Time now, bool* torn_down) {
  *torn_down = false;
  RegisteredWorker* w = ById(worker_id);
  if (w == nullptr || w->info.state == WorkerState::kDead) {
    return absl::AbortedError(
        absl::StrCat("worker_id '", worker_id, "' is no longer current; register again"));
  }
  w->info.last_seen = now;
  if (w->info.reported_job != running_job) {
    w->info.reported_job = running_job.substr(0, 256);
    *torn_down = running_job.empty() && w->info.state == WorkerState::kIdle;
  }
  return absl::OkStatus();
}

std::string WorkerRegistry::MarkDead(RegisteredWorker& w, const std::string& reason) {
  w.info.state = WorkerState::kDead;
  w.info.reason = reason;
  if (w.connection != nullptr) {
    w.info.last_seen = LastSeen(w, absl::InfinitePast());
    w.connection->Close(absl::UnavailableError(absl::StrCat("declared dead: ", reason)));
    w.connection = nullptr;
    w.info.connected = false;
  }
  LogWarning("worker ", w.info.registration.name, ": dead (", reason, ")");
  std::string job_id = std::move(w.info.job_id);
  w.info.job_id.clear();
  return job_id;
}

std::vector<RegisteredWorker*> WorkerRegistry::SilentWorkers(absl::Time now,
                                                             absl::Duration timeout) {
  std::vector<RegisteredWorker*> silent;
  for (auto& [name, w] : workers_) {
    if (w.info.state != WorkerState::kDead && now - LastSeen(w, now) > timeout) {
      silent.push_back(&w);
    }
  }
  return silent;
}

void WorkerRegistry::ForgetDead(absl::Time now) {
  std::vector<std::pair<absl::Time, std::string>> dead;  // (last seen, name)
  for (auto it = workers_.begin(); it != workers_.end();) {
    const WorkerInfo& info = it->second.info;
    if (info.state == WorkerState::kDead && now - info.last_seen > limits_.dead_retention) {
      names_by_id_.erase(info.worker_id);
      it = workers_.erase(it);
      continue;
    }
    if (info.state == WorkerState::kDead) dead.emplace_back(info.last_seen, it->first);
    ++it;
  }
  const size_t keep = static_cast<size_t>(std::max(0, limits_.max_dead_workers));
  if (dead.size() <= keep) return;
  // The longest dead go first.
  std::sort(dead.begin(), dead.end());
  for (size_t i = 0; i < dead.size() - keep; ++i) {
    auto it = workers_.find(dead[i].second);
    names_by_id_.erase(it->second.info.worker_id);
    workers_.erase(it);
  }
}

void WorkerRegistry::Reserve(RegisteredWorker& w, const std::string& job_id, int pipeline_rank,
                             int data_rank) {
  w.info.state = WorkerState::kBusy;
  w.info.job_id = job_id;
  w.info.pipeline_rank = pipeline_rank;
  w.info.data_rank = data_rank;
}

void WorkerRegistry::Release(const std::string& job_id,
                             const std::vector<std::string>& worker_names, bool cancel,
                             const std::string& reason) {
  for (const std::string& name : worker_names) {
    RegisteredWorker* w = ByName(name);
    if (w == nullptr) continue;
    if (w->info.state != WorkerState::kBusy || w->info.job_id != job_id) continue;
    if (cancel && w->connection != nullptr) {
      WorkerCommand command;
      command.kind = WorkerCommand::Kind::kCancel;
      command.job_id = job_id;
      command.reason = reason;
      w->connection->Send(std::move(command));
      // Until a heartbeat says otherwise, it is still tearing the job down.
      w->info.reported_job = job_id;
      w->connection->WantHeartbeat();
    }
    w->info.job_id.clear();
    if (w->connection != nullptr) {
      w->info.state = WorkerState::kIdle;
    } else {
      w->info.state = WorkerState::kDead;
      w->info.reason = "session stream closed";
    }
  }
}

std::vector<RegisteredWorker*> WorkerRegistry::IdleFor(
    DeviceKind device, std::vector<const WorkerRegistration*>* live) {
  std::vector<RegisteredWorker*> idle;
  for (auto& [name, w] : workers_) {
    if (w.info.state == WorkerState::kDead) continue;
    if (live != nullptr) live->push_back(&w.info.registration);
    if (w.info.state == WorkerState::kIdle && w.connection != nullptr &&
        w.info.reported_job.empty() && CannotRunReason(w.info.registration, device).empty()) {
      idle.push_back(&w);
    }
  }
  return idle;
}

std::optional<std::string> WorkerRegistry::WhyNotRunning(const RankSlot& slot,
                                                         const std::string& job_id) const {
  const std::string rank = RankName(slot.worker_name, slot.pipeline_rank, slot.data_rank);
  const RegisteredWorker* w = ByName(slot.worker_name);
  if (w == nullptr) return absl::StrCat(rank, " lost: no longer registered");
  const WorkerInfo& info = w->info;
  if (info.state == WorkerState::kDead) {
    return absl::StrCat(rank, " lost: ", info.reason.empty() ? "dead" : info.reason);
  }
  if (w->connection == nullptr) return absl::StrCat(rank, " lost: its session closed");
  if (info.job_id != job_id) return absl::StrCat(rank, " lost: the worker no longer runs the job");
  return std::nullopt;
}

absl::Status WorkerRegistry::CheckRank(const RegisteredWorker& w, const std::string& job_id,
                                       int pipeline_rank, int data_rank) {
  if (w.info.state != WorkerState::kBusy || w.info.job_id != job_id ||
      w.info.pipeline_rank != pipeline_rank || w.info.data_rank != data_rank) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankName(w.info.registration.name, pipeline_rank, data_rank),
                     " does not hold that rank of job '", job_id, "'"));
  }
  return absl::OkStatus();
}

bool WorkerRegistry::HoldsRank(const std::string& worker_name, const std::string& job_id,
                               int pipeline_rank, int data_rank) const {
  const RegisteredWorker* w = ByName(worker_name);
  return w != nullptr && w->info.job_id == job_id && w->info.pipeline_rank == pipeline_rank &&
         w->info.data_rank == data_rank;
}

RegisteredWorker* WorkerRegistry::ById(const std::string& worker_id) {
  auto it = names_by_id_.find(worker_id);
  return it == names_by_id_.end() ? nullptr : ByName(it->second);
}

RegisteredWorker* WorkerRegistry::ByName(const std::string& name) {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

const RegisteredWorker* WorkerRegistry::ByName(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

std::optional<std::string> WorkerRegistry::NameByInstance(const std::string& instance_id) const {
  if (instance_id.empty()) return std::nullopt;
  for (const auto& [name, w] : workers_) {
    if (w.info.state != WorkerState::kDead && w.info.registration.instance_id == instance_id) {
      return name;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::string> WorkerRegistry::NameOf(const std::string& worker_id) const {
  auto it = names_by_id_.find(worker_id);
  if (it == names_by_id_.end()) {
    return absl::NotFoundError(absl::StrCat("worker_id '", worker_id, "' is unknown"));
  }
  return it->second;
}

std::vector<WorkerInfo> WorkerRegistry::List(bool include_dead) const {
  std::vector<WorkerInfo> out;
  for (const auto& [name, w] : workers_) {
    if (include_dead || w.info.state != WorkerState::kDead) out.push_back(Listed(w));
  }
  return out;
}

WorkerPage WorkerRegistry::ListPage(bool include_dead, int page_size,
                                    const std::string& page_token) const {
  WorkerPage page;
  auto it = workers_.begin();
  if (!page_token.empty()) it = workers_.upper_bound(page_token);
  for (; it != workers_.end(); ++it) {
    if (!include_dead && it->second.info.state == WorkerState::kDead) continue;
    if (static_cast<int>(page.workers.size()) == page_size) {
      page.next_page_token = page.workers.back().registration.name;
      break;
    }
    page.workers.push_back(Listed(it->second));
  }
  return page;
}

std::array<int64_t, 3> WorkerRegistry::CountByState() const {
  std::array<int64_t, 3> counts = {};
  for (const auto& [name, w] : workers_) ++counts[static_cast<int>(w.info.state)];
  return counts;
}

}  // namespace zpipe::coordinator
