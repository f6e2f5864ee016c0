#include "coordinator/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "artifact/artifact_ref.h"

namespace zpipe::coordinator {
namespace fs = std::filesystem;
namespace {

absl::Status OsError(absl::string_view what, const fs::path& path, int err) {
  return absl::InternalError(
      absl::StrCat("artifact store: cannot ", what, " '", path.string(), "': ",
                   std::strerror(err)));
}

std::string Bytes(uint64_t n) {
  constexpr uint64_t kGiB = uint64_t{1} << 30, kMiB = uint64_t{1} << 20;
  if (n >= kGiB && n % kGiB == 0) return absl::StrCat(n / kGiB, " GiB");
  if (n >= kMiB && n % kMiB == 0) return absl::StrCat(n / kMiB, " MiB");
  return absl::StrCat(n, " bytes");
}

absl::Status OverCap(absl::string_view what, uint64_t size, uint64_t cap) {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " ", Bytes(size), " is over the coordinator's cap of ", Bytes(cap),
      " per job (zpipe-coordinator --artifact-max-job-bytes); put larger files on a volume the "
      "workers share (docs/operations.md, \"Giving ZeroPipe your model and data\") or raise the "
      "cap"));
}

std::string RandomName() {
  static thread_local std::mt19937_64 rng(
      std::random_device{}() ^ std::chrono::steady_clock::now().time_since_epoch().count());
  return absl::StrFormat("upload-%016x", rng());
}

std::vector<std::pair<const char*, const std::string*>> SpecFiles(const JobSpec& spec) {
  std::vector<std::pair<const char*, const std::string*>> out;
  if (const auto* t = std::get_if<TorchScriptConfig>(&spec.model)) {
    out.push_back({"spec.model.torchscript.path", &t->path});
  }
  if (const auto* p = std::get_if<PythonConfig>(&spec.model)) {
    out.push_back({"spec.model.python.file", &p->file});
  }
  out.push_back({"spec.data.path", &spec.data_file.path});
  out.push_back({"spec.eval.path", &spec.eval.path});
  return out;
}

}  // namespace

absl::Status CheckArtifacts(const ArtifactStore* store, const JobSpec& spec) {
  if (store != nullptr) return store->CheckSpec(spec);
  for (const auto& [field, path] : SpecFiles(spec)) {
    if (artifact::IsArtifactRef(*path)) {
      return absl::UnavailableError(absl::StrCat(
          field, ": names an uploaded artifact, but this coordinator stores none (started with "
                 "--db :memory: and no --artifact-dir); start it with --artifact-dir DIR"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> ArtifactDigests(const JobSpec& spec) {
  std::vector<std::string> out;
  for (const auto& [field, path] : SpecFiles(spec)) {
    if (!artifact::IsArtifactRef(*path)) continue;
    absl::StatusOr<std::string> hex = artifact::ParseArtifactRef(*path);
    if (hex.ok()) out.push_back(*std::move(hex));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(ArtifactStoreOptions options) {
  std::unique_ptr<ArtifactStore> store(new ArtifactStore(std::move(options)));
  const fs::path root(store->options_.dir);
  for (const fs::path& dir : {root / "sha256", root / "tmp"}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return OsError("create folder", dir, ec.value());
  }
  // Uploads a crash interrupted.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root / "tmp", ec)) {
    fs::remove(e.path(), ec);
  }
  return store;
}

fs::path ArtifactStore::PathOf(absl::string_view sha256) const {
  return fs::path(options_.dir) / "sha256" / std::string(sha256);
}

ArtifactStore::Upload::Upload(const ArtifactStore& store, std::string sha256, uint64_t size,
                              fs::path tmp, int fd)
    : store_(store), sha256_(std::move(sha256)), size_(size), tmp_(std::move(tmp)), fd_(fd) {}

ArtifactStore::Upload::~Upload() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(tmp_.c_str());
}

absl::Status ArtifactStore::Upload::Append(absl::string_view data) {
  if (data.size() > size_ - received_) {
    return absl::InvalidArgumentError(absl::StrCat("artifact sha256:", sha256_, ": more than the ",
                                                   size_, " bytes its first message declared"));
  }
  hash_.Update(data);
  received_ += data.size();
  while (!data.empty()) {
    const ssize_t n = write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return OsError("write", tmp_, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ArtifactStore::Upload::Commit() {
  if (received_ != size_) {
    return absl::InvalidArgumentError(absl::StrCat("artifact sha256:", sha256_, ": declared ",
                                                   size_, " bytes, received ", received_));
  }
  const std::string got = hash_.HexDigest();
  if (got != sha256_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact: the bytes received hash to sha256:", got, ", not the sha256:", sha256_,
        " the upload claimed; nothing was stored (was the file changed while it was sent?)"));
  }
  if (fsync(fd_) != 0) return OsError("sync", tmp_, errno);
  close(fd_);
  fd_ = -1;
  const fs::path dest = store_.PathOf(sha256_);
  if (rename(tmp_.c_str(), dest.c_str()) != 0) return OsError("store", dest, errno);
  committed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> ArtifactStore::BeginUpload(
    absl::string_view sha256, uint64_t size) const {
  if (!artifact::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sha256: '", sha256.substr(0, 100),
        "' is not a SHA-256 digest: want 64 lower-case hex digits in the first message"));
  }
  if (size > options_.max_job_bytes) {
    return OverCap(absl::StrCat("artifact sha256:", sha256, " of"), size, options_.max_job_bytes);
  }
  const fs::path tmp = fs::path(options_.dir) / "tmp" / RandomName();
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) return OsError("create", tmp, errno);
  return std::unique_ptr<Upload>(new Upload(*this, std::string(sha256), size, tmp, fd));
}

std::optional<uint64_t> ArtifactStore::Size(absl::string_view sha256, bool touch) const {
  if (!artifact::IsSha256Hex(sha256)) return std::nullopt;
  const fs::path path = PathOf(sha256);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (touch) utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return static_cast<uint64_t>(st.st_size);
}

absl::Status ArtifactStore::Read(
    absl::string_view sha256, size_t chunk_bytes,
    const std::function<bool(uint64_t total, absl::string_view chunk)>& sink) const {
  if (!artifact::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sha256: '", sha256.substr(0, 100),
        "' is not a SHA-256 digest (64 lower-case hex digits)"));
  }
  const fs::path path = PathOf(sha256);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("artifact sha256:", sha256,
                                              " is not on this coordinator (never uploaded, or "
                                              "deleted after its jobs ended)"));
    }
    return OsError("open", path, errno);
  }
  struct stat st;
  fstat(fd, &st);
  const uint64_t total = static_cast<uint64_t>(st.st_size);
  std::vector<char> buffer(std::max<size_t>(1, chunk_bytes));
  absl::Status result = absl::OkStatus();
  uint64_t sent = 0;
  do {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result = OsError("read", path, errno);
      break;
    }
    if (n == 0 && sent > 0) break;
    sent += static_cast<uint64_t>(n);
    if (!sink(total, absl::string_view(buffer.data(), static_cast<size_t>(n)))) {
      result = absl::CancelledError("artifact: the reader went away");
      break;
    }
    if (n == 0) break;  // an empty artifact: one empty chunk carries its size
  } while (sent < total);
  close(fd);
  return result;
}

absl::Status ArtifactStore::CheckSpec(const JobSpec& spec) const {
  uint64_t total = 0;
  std::set<std::string> counted;
  for (const auto& [field, path] : SpecFiles(spec)) {
    if (!artifact::IsArtifactRef(*path)) continue;
    absl::StatusOr<std::string> hex = artifact::ParseArtifactRef(*path);
    if (!hex.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", hex.status().message()));
    }
    std::optional<uint64_t> size = Size(*hex);
    if (!size.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": artifact sha256:", *hex,
          " is not on this coordinator; upload it first (zpipe submit --upload)"));
    }
    if (counted.insert(*hex).second) total += *size;
  }
  if (total > options_.max_job_bytes) {
    return OverCap("the job's artifacts hold", total, options_.max_job_bytes);
  }
  return absl::OkStatus();
}

int ArtifactStore::Sweep(const absl::flat_hash_map<std::string, absl::Time>& in_use_until,
                         absl::Time now) const {
  int deleted = 0;
  std::error_code ec;
  const fs::path stored = fs::path(options_.dir) / "sha256";
  for (const fs::directory_entry& e : fs::directory_iterator(stored, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st;
    if (stat(e.path().c_str(), &st) != 0) continue;
    absl::Time needed_until = absl::FromUnixSeconds(st.st_mtim.tv_sec);  // its last upload
    if (auto it = in_use_until.find(name); it != in_use_until.end()) {
      needed_until = std::max(needed_until, it->second);
    }
    if (needed_until == absl::InfiniteFuture() || needed_until + options_.retention > now) continue;
    if (fs::remove(e.path(), ec)) ++deleted;
  }
  return deleted;
}

}  // namespace zpipe::coordinator
