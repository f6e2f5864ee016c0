// A rendezvous store in a directory, for the processes of one machine that have no coordinator
// between them (scripts/gpu-check runs a pipeline as two processes sharing one GPU this way).
//
// Each key is a file named by the key's hex encoding; Set writes a temporary file and renames it,
// so a reader sees a whole value or none. Wait polls every few milliseconds. Same limits and
// semantics as every KeyValueStore (key_value_store.h).
#ifndef ZPIPE_WORKER_COMM_FILE_STORE_H_
#define ZPIPE_WORKER_COMM_FILE_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/key_value_store.h"

namespace zpipe::worker {

// Creates `dir` if needed. INVALID_ARGUMENT when it cannot be created or is not a directory.
absl::StatusOr<std::unique_ptr<KeyValueStore>> NewFileStore(const std::string& dir);

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_FILE_STORE_H_
