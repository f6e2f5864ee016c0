// Artifact references: how a job spec names a file that was uploaded to the coordinator
// (`zpipe submit --upload`, docs/operations.md "Giving ZeroPipe your model and data") instead of a path on the
// workers: `artifact:sha256:<64 lower-case hex digits>`, the SHA-256 of the file's bytes. The
// fields that may hold one are the files a worker reads: model.torchscript.path, data.path and
// eval.path (never checkpoint.dir, which is written). A path that does not start with
// "artifact:" keeps its meaning (a file on the workers); one that does must be a well-formed
// reference.
#ifndef ZPIPE_ARTIFACT_ARTIFACT_REF_H_
#define ZPIPE_ARTIFACT_ARTIFACT_REF_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe::artifact {

inline constexpr absl::string_view kRefPrefix = "artifact:sha256:";

// True for 64 lower-case hex digits.
bool IsSha256Hex(absl::string_view hex);

// True when `path` claims to be a reference (starts with "artifact:"), well-formed or not.
bool IsArtifactRef(absl::string_view path);

// The digest a reference names. INVALID_ARGUMENT "'REF' is not an artifact reference: want
// artifact:sha256:<64 lower-case hex digits>" otherwise.
absl::StatusOr<std::string> ParseArtifactRef(absl::string_view ref);

// "artifact:sha256:" + hex.
std::string MakeArtifactRef(absl::string_view hex);

// A spec field that names a file a worker reads.
struct FileField {
  const char* name;   // its path in the spec, e.g. "spec.data.path"
  std::string* path;  // points into the spec; may be empty (the field is unset)
};

// The file fields of `spec`: model.torchscript.path or model.python.file (for those models; a
// Python model travels as its one file: modules beside it do not), data.path and
// eval.path (when those sections are set). The pointers live as long as `spec` is unchanged.
std::vector<FileField> FileFields(zpipe::v1::JobSpec& spec);

}  // namespace zpipe::artifact

#endif  // ZPIPE_ARTIFACT_ARTIFACT_REF_H_
