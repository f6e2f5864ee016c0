// Sha256: streaming SHA-256, the digest that names an artifact (artifact_ref.h). Uploads, the
// coordinator's store and the workers' caches hash what they read or write as it passes, so no
// file is ever held in memory whole.
#ifndef ZPIPE_ARTIFACT_SHA256_H_
#define ZPIPE_ARTIFACT_SHA256_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::artifact {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // The digest of everything passed to Update, as 64 lower-case hex digits. Call once; the
  // hasher is spent afterwards.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct FileDigest {
  std::string sha256;  // 64 lower-case hex digits
  uint64_t size = 0;   // bytes
};

// Hashes the file at `path` in 1 MiB reads. NOT_FOUND / PERMISSION_DENIED / INTERNAL naming the
// path and the OS error when it cannot be read.
absl::StatusOr<FileDigest> HashFile(const std::string& path);

}  // namespace zpipe::artifact

#endif  // ZPIPE_ARTIFACT_SHA256_H_
