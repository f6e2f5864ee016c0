#include "worker/daemon/data_roots.h"

#include <algorithm>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zpipe::worker {
namespace fs = std::filesystem;

namespace {

// `path` made absolute against the working directory and resolved through symlinks and "..".
absl::StatusOr<fs::path> Resolve(const std::string& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return absl::InvalidArgumentError(ec.message());
  fs::path resolved = fs::weakly_canonical(absolute, ec);
  if (ec) return absl::InvalidArgumentError(ec.message());
  return resolved.lexically_normal();
}

// True when `path` is `root` or inside it, comparing whole components (so /data2 is not under
// /data). Both canonical; a trailing separator on either does not matter.
bool IsUnder(const fs::path& path, const fs::path& root) {
  auto strip = [](const fs::path& p) {
    std::vector<fs::path> parts;
    for (const fs::path& part : p) {
      if (!part.empty()) parts.push_back(part);
    }
    return parts;
  };
  const std::vector<fs::path> p = strip(path), r = strip(root);
  return r.size() <= p.size() && std::equal(r.begin(), r.end(), p.begin());
}

}  // namespace

absl::StatusOr<DataRoots> DataRoots::Make(const std::vector<std::string>& roots) {
  DataRoots out;
  std::vector<std::string> given = roots;
  if (given.empty()) {
    std::error_code ec;
    given.push_back(fs::current_path(ec).string());
    if (ec) return absl::InternalError(absl::StrCat("working directory: ", ec.message()));
  }
  for (const std::string& root : given) {
    std::error_code ec;
    fs::path canonical = fs::canonical(root, ec);
    if (ec || !fs::is_directory(canonical, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-root ", root, ": ", ec ? ec.message() : "not a directory"));
    }
    out.roots_.push_back(canonical);
  }
  return out;
}

absl::Status DataRoots::Check(absl::string_view field, const std::string& path) const {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<fs::path> resolved = Resolve(path);
  if (!resolved.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", path, "': cannot resolve: ", resolved.status().message()));
  }
  for (const fs::path& root : roots_) {
    if (IsUnder(*resolved, root)) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (const fs::path& root : roots_) names.push_back(root.string());
  return absl::PermissionDeniedError(absl::StrCat(
      field, " '", path, "'",
      resolved->string() == path ? "" : absl::StrCat(" (resolves to ", resolved->string(), ")"),
      " is outside this worker's data roots (", absl::StrJoin(names, ", "),
      "); start zpipe-worker with --data-root DIR to allow it"));
}

absl::Status DataRoots::CheckJob(const JobSettings& job) const {
  if (const auto* ts = std::get_if<TorchScriptSource>(&job.model)) {
    if (absl::Status st = Check("model.torchscript.path", ts->path); !st.ok()) return st;
  }
  if (const auto* py = std::get_if<PythonSource>(&job.model)) {
    // Code the worker runs: under the roots like any file it reads, checked before any import.
    if (absl::Status st = Check("model.python.file", py->file); !st.ok()) return st;
  }
  if (job.data) {
    if (absl::Status st = Check("data.path", job.data->path); !st.ok()) return st;
  }
  if (job.eval) {
    if (absl::Status st = Check("eval.path", job.eval->path); !st.ok()) return st;
  }
  if (job.checkpoint) {
    // An empty dir puts checkpoints in the working directory.
    const std::string& dir = job.checkpoint->dir;
    if (absl::Status st = Check("checkpoint.dir", dir.empty() ? "." : dir); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker
