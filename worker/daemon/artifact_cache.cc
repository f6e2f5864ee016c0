#include "worker/daemon/artifact_cache.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "artifact/artifact_ref.h"
#include "artifact/sha256.h"
#include "grpcpp/grpcpp.h"
#include "util/log.h"
#include "zpipe/v1/artifact.grpc.pb.h"

namespace zpipe::worker {
namespace fs = std::filesystem;
namespace {

class GrpcArtifactSource : public ArtifactSource {
 public:
  GrpcArtifactSource(std::shared_ptr<grpc::Channel> channel, std::string token)
      : stub_(zpipe::v1::ArtifactService::NewStub(std::move(channel))), token_(std::move(token)) {}

  absl::Status Fetch(const std::string& sha256,
                     const std::function<absl::Status(absl::string_view)>& sink) override {
    grpc::ClientContext ctx;
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
    zpipe::v1::FetchArtifactRequest req;
    req.set_sha256(sha256);
    std::unique_ptr<grpc::ClientReader<zpipe::v1::FetchArtifactResponse>> reader =
        stub_->FetchArtifact(&ctx, req);
    zpipe::v1::FetchArtifactResponse msg;
    absl::Status sunk = absl::OkStatus();
    while (reader->Read(&msg)) {
      sunk = sink(msg.data());
      if (!sunk.ok()) {
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status st = reader->Finish();
    if (!sunk.ok()) return sunk;
    if (!st.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("fetching from the coordinator: ", st.error_message()));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<zpipe::v1::ArtifactService::Stub> stub_;
  const std::string token_;
};

// Hashes the file; "" when it cannot be read.
std::string DigestOf(const fs::path& path) {
  absl::StatusOr<artifact::FileDigest> d = artifact::HashFile(path.string());
  return d.ok() ? d->sha256 : "";
}

}  // namespace

std::unique_ptr<ArtifactSource> MakeGrpcArtifactSource(std::shared_ptr<grpc::Channel> channel,
                                                       std::string token) {
  return std::make_unique<GrpcArtifactSource>(std::move(channel), std::move(token));
}

absl::StatusOr<std::unique_ptr<ArtifactCache>> ArtifactCache::Open(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return absl::InvalidArgumentError(absl::StrCat("--artifact-cache ", dir.string(),
                                                   ": cannot create the folder: ", ec.message()));
  }
  return std::unique_ptr<ArtifactCache>(new ArtifactCache(fs::absolute(dir)));
}

absl::StatusOr<std::string> ArtifactCache::Get(const std::string& sha256, ArtifactSource& source) {
  if (!artifact::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("'", sha256, "' is not a SHA-256 digest"));
  }
  absl::MutexLock lock(&mu_);
  const fs::path path = dir_ / sha256;
  if (fs::exists(path)) {
    if (DigestOf(path) == sha256) {
      Log(absl::StrCat("artifact sha256:", sha256, ": cache hit (", path.string(), ", verified)"));
      return path.string();
    }
    Log(absl::StrCat("artifact sha256:", sha256,
                     ": the cached copy does not match; fetching again"));
    std::error_code ec;
    fs::remove(path, ec);
  }
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const fs::path tmp = dir_ / absl::StrFormat(".fetch-%016x", rng());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create '", tmp.string(), "': ", std::strerror(errno)));
  }
  artifact::Sha256 hash;
  uint64_t bytes = 0;
  absl::Status st = source.Fetch(sha256, [&](absl::string_view chunk) -> absl::Status {
    hash.Update(chunk);
    bytes += chunk.size();
    if (std::fwrite(chunk.data(), 1, chunk.size(), f) != chunk.size()) {
      return absl::InternalError(
          absl::StrCat("cannot write '", tmp.string(), "': ", std::strerror(errno)));
    }
    return absl::OkStatus();
  });
  if (std::fclose(f) != 0 && st.ok()) {
    st = absl::InternalError(
        absl::StrCat("cannot write '", tmp.string(), "': ", std::strerror(errno)));
  }
  const std::string got = hash.HexDigest();
  if (st.ok() && got != sha256) {
    st = absl::FailedPreconditionError(absl::StrCat(
        "the ", bytes, " bytes fetched hash to sha256:", got, ", not the sha256:", sha256,
        " asked for; not used"));
  }
  if (!st.ok()) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return st;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot store '", path.string(), "': ", ec.message()));
  }
  Log(absl::StrCat("artifact sha256:", sha256, ": fetched ", bytes, " bytes from the coordinator"));
  return path.string();
}

absl::Status ArtifactCache::Resolve(zpipe::v1::JobSpec& spec, ArtifactSource& source) {
  for (const artifact::FileField& field : artifact::FileFields(spec)) {
    if (!artifact::IsArtifactRef(*field.path)) continue;
    absl::StatusOr<std::string> sha256 = artifact::ParseArtifactRef(*field.path);
    if (!sha256.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field.name, ": ", sha256.status().message()));
    }
    absl::StatusOr<std::string> local = Get(*sha256, source);
    if (!local.ok()) {
      return absl::Status(local.status().code(),
                          absl::StrCat(field.name, ": artifact sha256:", *sha256, ": ",
                                       local.status().message()));
    }
    *field.path = *local;
  }
  return absl::OkStatus();
}

}  // namespace zpipe::worker
