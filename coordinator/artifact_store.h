// ArtifactStore: the coordinator's content-addressed store of uploaded files (`zpipe submit
// --upload`; proto/zpipe/v1/artifact.proto). A file is named by the SHA-256 of its bytes and kept
// at DIR/sha256/<hex>; job specs name it "artifact:sha256:<hex>" (artifact/artifact_ref.h).
//
// Writes stream to disk: an upload appends each chunk to DIR/tmp/<random> while hashing it, and
// only Commit() (exactly the declared size, the claimed digest) fsyncs the file and renames it
// into place, so a reader never sees a partial artifact and memory does not grow with its size.
// An upload dropped before Commit() leaves nothing (its temp file is removed; temp files left by
// a crash are removed by Open()).
//
// Bounds: one artifact, and the artifacts one job names together, may hold at most
// `max_job_bytes` (--artifact-max-job-bytes): RESOURCE_EXHAUSTED naming the cap and the flag.
//
// Deletion (Sweep): an artifact goes once no job still needs it (a deleted job needs none): no
// job that is not terminal names it, the last job that named it ended more than `retention` ago
// (--artifact-retention), and it was uploaded (or uploaded again) more than `retention` ago.
//
// Thread-safe: uploads of the same digest may race; the rename makes the last one win with the
// same bytes.
#ifndef ZPIPE_COORDINATOR_ARTIFACT_STORE_H_
#define ZPIPE_COORDINATOR_ARTIFACT_STORE_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "artifact/sha256.h"
#include "coordinator/domain.h"

namespace zpipe::coordinator {

struct ArtifactStoreOptions {
  std::string dir;  // created if missing
  uint64_t max_job_bytes = uint64_t{2} << 30;
  absl::Duration retention = absl::Hours(1);
};

class ArtifactStore {
 public:
  // Creates DIR/sha256 and DIR/tmp and empties DIR/tmp. INTERNAL naming the folder and the OS
  // error when it cannot.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(ArtifactStoreOptions options);

  // One upload in progress; destroying it before Commit() discards it. Not thread-safe.
  class Upload {
   public:
    ~Upload();
    // Appends the next chunk. INVALID_ARGUMENT once more bytes arrive than were declared;
    // INTERNAL when the disk refuses (naming the file and the OS error).
    absl::Status Append(absl::string_view data);
    // Checks the size and the digest, then stores the artifact. INVALID_ARGUMENT naming both
    // sizes or both digests when they differ; INTERNAL when the disk refuses.
    absl::Status Commit();

   private:
    friend class ArtifactStore;
    Upload(const ArtifactStore& store, std::string sha256, uint64_t size,
           std::filesystem::path tmp, int fd);
    const ArtifactStore& store_;
    const std::string sha256_;
    const uint64_t size_;
    const std::filesystem::path tmp_;
    int fd_;
    uint64_t received_ = 0;
    artifact::Sha256 hash_;
    bool committed_ = false;
  };

  // Starts an upload of `size` bytes claimed to hash to `sha256`. INVALID_ARGUMENT for a
  // malformed digest; RESOURCE_EXHAUSTED when `size` is over max_job_bytes.
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(absl::string_view sha256,
                                                      uint64_t size) const;

  // The size of a stored artifact, nullopt when it is not held. `touch` renews its upload time
  // (an upload of what is already held), so Sweep keeps it for another `retention`.
  std::optional<uint64_t> Size(absl::string_view sha256, bool touch = false) const;

  // Streams a stored artifact: `sink(total, chunk)` for each chunk of at most `chunk_bytes`, in
  // order, until the end or until it returns false (then CANCELLED). NOT_FOUND when not held.
  absl::Status Read(absl::string_view sha256, size_t chunk_bytes,
                    const std::function<bool(uint64_t total, absl::string_view chunk)>& sink) const;

  // Every artifact `spec` names is held, and together they fit max_job_bytes. INVALID_ARGUMENT
  // "spec.data.path: artifact sha256:... is not on this coordinator; upload it (zpipe submit
  // --upload)" for a malformed or missing one; RESOURCE_EXHAUSTED over the cap. OK for a spec
  // that names none.
  absl::Status CheckSpec(const JobSpec& spec) const;

  // Deletes every artifact no job needs any more (see above). `in_use_until` maps a digest to
  // the time until which a job needs it: absl::InfiniteFuture() for a job that is not terminal,
  // its end time for one that is. Returns how many it deleted.
  int Sweep(const absl::flat_hash_map<std::string, absl::Time>& in_use_until,
            absl::Time now) const;

  const ArtifactStoreOptions& options() const { return options_; }

 private:
  explicit ArtifactStore(ArtifactStoreOptions options) : options_(std::move(options)) {}
  std::filesystem::path PathOf(absl::string_view sha256) const;

  const ArtifactStoreOptions options_;
};

// store->CheckSpec(spec); with no store (null), OK for a spec that names no artifact and
// UNAVAILABLE saying how to turn the store on for one that does.
absl::Status CheckArtifacts(const ArtifactStore* store, const JobSpec& spec);

// The digests of the artifacts `spec` names (malformed references are skipped).
std::vector<std::string> ArtifactDigests(const JobSpec& spec);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_ARTIFACT_STORE_H_
