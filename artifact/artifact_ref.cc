#include "artifact/artifact_ref.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zpipe::artifact {

bool IsSha256Hex(absl::string_view hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsArtifactRef(absl::string_view path) { return absl::StartsWith(path, "artifact:"); }

absl::StatusOr<std::string> ParseArtifactRef(absl::string_view ref) {
  if (!absl::StartsWith(ref, kRefPrefix) || !IsSha256Hex(ref.substr(kRefPrefix.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", ref.substr(0, 100),
                     "' is not an artifact reference: want artifact:sha256:<64 lower-case hex "
                     "digits> (what `zpipe submit --upload` writes)"));
  }
  return std::string(ref.substr(kRefPrefix.size()));
}

std::string MakeArtifactRef(absl::string_view hex) { return absl::StrCat(kRefPrefix, hex); }

std::vector<FileField> FileFields(zpipe::v1::JobSpec& spec) {
  std::vector<FileField> out;
  if (spec.model().has_torchscript()) {
    out.push_back({"spec.model.torchscript.path",
                   spec.mutable_model()->mutable_torchscript()->mutable_path()});
  }
  if (spec.model().has_python()) {
    out.push_back({"spec.model.python.file", spec.mutable_model()->mutable_python()->mutable_file()});
  }
  if (spec.has_data()) out.push_back({"spec.data.path", spec.mutable_data()->mutable_path()});
  if (spec.has_eval()) out.push_back({"spec.eval.path", spec.mutable_eval()->mutable_path()});
  return out;
}

}  // namespace zpipe::artifact
