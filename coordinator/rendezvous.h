// Rendezvous: a per-job key/value store that workers use to bootstrap their TCP streams and NCCL.
//
// A job's namespace is opened when the job is accepted and closed when it reaches a terminal
// state; closing drops its keys and fails pending waits with Cancelled. Waits use the real time
// deadline they are given. Thread-safe.
//
// Quota: each job may hold at most `RendezvousLimits::job_keys` keys and `job_bytes` bytes of keys
// plus values, so that a flood of writes is refused (ResourceExhausted, naming the coordinator
// flag that sets the limit) instead of growing the coordinator without bound. Overwriting a key
// counts its new size only. All jobs together may hold at most `total_bytes`, so that many jobs
// each within their quota cannot together exhaust the coordinator's memory.
#ifndef ZPIPE_COORDINATOR_RENDEZVOUS_H_
#define ZPIPE_COORDINATOR_RENDEZVOUS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zpipe::coordinator {

// Per-job quota (coordinator flags --rendezvous-job-bytes and --rendezvous-job-keys) and the cap
// of all jobs together (--rendezvous-total-bytes: 16 jobs at their full default quota).
struct RendezvousLimits {
  size_t job_bytes = size_t{64} << 20;  // keys + values
  size_t job_keys = 16384;
  size_t total_bytes = size_t{1} << 30;  // keys + values of every open job
};

class Rendezvous {
 public:
  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxWaitKeys = 1024;

  explicit Rendezvous(RendezvousLimits limits = {}) : limits_(limits) {}

  void Open(const std::string& job_id);
  void Close(const std::string& job_id);
  bool IsOpen(const std::string& job_id) const;

  // NotFound for a job not open; InvalidArgument for a bad key or value; ResourceExhausted when
  // the write would take the job past its key or byte quota, or all jobs past total_bytes
  // (nothing is stored then).
  absl::Status Set(const std::string& job_id, const std::string& key, std::string value);
  // NotFound for a job not open or a missing key.
  absl::StatusOr<std::string> Get(const std::string& job_id, const std::string& key) const;
  // Values of `keys` once all exist. DeadlineExceeded at `deadline`; Cancelled when the job is
  // closed or `cancelled()` (polled every 50 ms) returns true.
  absl::StatusOr<std::vector<std::string>> Wait(const std::string& job_id,
                                                const std::vector<std::string>& keys,
                                                absl::Time deadline,
                                                const std::function<bool()>& cancelled) const;
  // Bytes of keys plus values the job holds (0 for a job not open): what its quota counts.
  size_t JobBytes(const std::string& job_id) const;
  // Bytes of keys plus values all open jobs hold: what total_bytes counts.
  size_t TotalBytes() const;

 private:
  struct Keys {
    absl::flat_hash_map<std::string, std::string> values;
    size_t bytes = 0;  // sum of key and value sizes
  };
  const RendezvousLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Keys> jobs_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of every job's Keys::bytes
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_RENDEZVOUS_H_
