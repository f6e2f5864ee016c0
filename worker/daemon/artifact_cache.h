// ArtifactCache: the worker's copies of uploaded artifacts (`zpipe submit --upload`;
// proto/zpipe/v1/artifact.proto). A job spec may name a file as "artifact:sha256:<hex>"
// (artifact/artifact_ref.h) instead of a path on the worker; before the job touches anything,
// Resolve() replaces each such reference with the path of a local copy, so the rest of the worker
// (data roots, model loading, token files) sees ordinary paths.
//
// Copies live in one folder (by default .zpipe-artifacts under the worker's first --data-root;
// zpipe-worker --artifact-cache DIR), named by their digest. A copy is fetched from the
// coordinator (ArtifactSource) into a temporary file while being hashed and renamed into place
// only when its SHA-256 is the one asked for; a copy already there is hashed again before every
// use (a cache hit costs one read of the file, not a download), and one that no longer matches is
// fetched again. Copies stay until the folder is cleared (a pod's emptyDir goes with the pod).
//
// Thread-safe: one fetch at a time (a profile request and a rank of the same job may ask for the
// same artifact at once; the second finds the first's copy).
#ifndef ZPIPE_WORKER_DAEMON_ARTIFACT_CACHE_H_
#define ZPIPE_WORKER_DAEMON_ARTIFACT_CACHE_H_

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "zpipe/v1/job.pb.h"

namespace grpc {
class Channel;
}

namespace zpipe::worker {

// Where artifacts come from.
class ArtifactSource {
 public:
  virtual ~ArtifactSource() = default;
  // Streams the artifact `sha256` to `sink`, chunk by chunk in order; the first error `sink`
  // returns ends the fetch with it. NOT_FOUND when the source does not hold it.
  virtual absl::Status Fetch(const std::string& sha256,
                             const std::function<absl::Status(absl::string_view)>& sink) = 0;
};

// The coordinator's FetchArtifact over `channel`, with `token` as the worker token (empty: none).
std::unique_ptr<ArtifactSource> MakeGrpcArtifactSource(std::shared_ptr<grpc::Channel> channel,
                                                       std::string token);

class ArtifactCache {
 public:
  // Creates `dir` if missing. INVALID_ARGUMENT naming the folder when it cannot.
  static absl::StatusOr<std::unique_ptr<ArtifactCache>> Open(const std::filesystem::path& dir);

  // The path of a verified local copy of artifact `sha256`, fetched from `source` when there is
  // none (or the one there does not hash to `sha256`). FAILED_PRECONDITION naming both digests
  // when the fetched bytes do not match; the source's error (NOT_FOUND: not uploaded, or deleted)
  // otherwise.
  absl::StatusOr<std::string> Get(const std::string& sha256, ArtifactSource& source);

  // Replaces every artifact reference in `spec`'s file fields with the path of its local copy.
  // Errors start with the field, e.g. "spec.data.path: artifact sha256:...: ...".
  absl::Status Resolve(zpipe::v1::JobSpec& spec, ArtifactSource& source);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  explicit ArtifactCache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path dir_;
  absl::Mutex mu_;  // one Get at a time (it guards the folder's files, not a member)
};

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_ARTIFACT_CACHE_H_
