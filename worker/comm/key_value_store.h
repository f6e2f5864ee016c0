// Rendezvous key/value store: how the ranks of a job find each other.
//
// The TCP streams exchange their addresses and NCCL its unique ids through a `KeyValueStore`. In a job the
// coordinator serves one per job attempt over gRPC (zpipe.v1 WorkerService.Rendezvous*); tests use
// `NewInMemoryStore()` shared by threads. The limits below are the coordinator's, so a key that
// works in tests also works against the real service.
#ifndef ZPIPE_WORKER_COMM_KEY_VALUE_STORE_H_
#define ZPIPE_WORKER_COMM_KEY_VALUE_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace zpipe::worker {

inline constexpr size_t kMaxRendezvousKeyBytes = 512;
inline constexpr size_t kMaxRendezvousValueBytes = 1 << 20;

// All methods are thread-safe. Keys are 1..512 bytes, values at most 1 MiB (INVALID_ARGUMENT
// otherwise). Keys live as long as the store (the job attempt).
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Stores `value` under `key`, overwriting any previous value, and wakes waiters.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of `key`; NOT_FOUND when it does not exist. Never blocks.
  virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;

  // Blocks until every key exists and returns their values (values[i] belongs to keys[i]).
  // DEADLINE_EXCEEDED, naming the missing keys, when `deadline` passes first.
  virtual absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                        absl::Time deadline) = 0;
};

// The indices of `keys` not set in `store`: what a Wait that timed out is still waiting for.
std::vector<int> UnsetKeys(KeyValueStore& store, const std::vector<std::string>& keys);

// A process-local store for tests and single-process runs; share it by reference between threads.
std::unique_ptr<KeyValueStore> NewInMemoryStore();

// A view of `base` that prepends `prefix` to every key (e.g. "job1/a1/"); `base` must outlive it.
std::unique_ptr<KeyValueStore> NewPrefixStore(KeyValueStore& base, std::string prefix);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_KEY_VALUE_STORE_H_
