#include "coordinator/artifact_service.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "artifact/artifact_ref.h"
#include "coordinator/grpc_auth.h"
#include "coordinator/grpc_status.h"
#include "util/log.h"

namespace zpipe::coordinator {
namespace {

absl::Status NoStore() {
  return absl::UnavailableError(
      "this coordinator stores no artifacts: start zpipe-coordinator with --artifact-dir DIR to "
      "accept `zpipe submit --upload`, or put the files on a volume the workers share");
}

}  // namespace

grpc::Status ArtifactServiceImpl::Done(absl::string_view method, const absl::Status& status) {
  metrics_.CountRpc(method, status.code());
  return ToGrpcStatus(status);
}

grpc::Status ArtifactServiceImpl::UploadArtifact(
    grpc::ServerContext* ctx, grpc::ServerReader<v1::UploadArtifactRequest>* reader,
    v1::UploadArtifactResponse* resp) {
  // Uploading is part of submitting a job: the same role.
  absl::StatusOr<Principal> caller = CallerOf(auth_, *ctx, Role::kClient, "upload artifacts");
  if (!caller.ok()) return Done("UploadArtifact", caller.status());
  if (store_ == nullptr) return Done("UploadArtifact", NoStore());
  return Done("UploadArtifact", Upload(reader, resp));
}

absl::Status ArtifactServiceImpl::Upload(grpc::ServerReader<v1::UploadArtifactRequest>* reader,
                                         v1::UploadArtifactResponse* resp) {
  v1::UploadArtifactRequest msg;
  if (!reader->Read(&msg)) return absl::InvalidArgumentError("upload: no message arrived");
  const std::string sha256 = msg.sha256();
  resp->set_ref(artifact::MakeArtifactRef(sha256));
  resp->set_size(msg.size());
  if (artifact::IsSha256Hex(sha256)) {
    if (std::optional<uint64_t> held = store_->Size(sha256, /*touch=*/true);
        held.has_value() && *held == msg.size()) {
      resp->set_created(false);  // the client may stop sending; the rest is not read
      return absl::OkStatus();
    }
  }
  absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> upload =
      store_->BeginUpload(sha256, msg.size());
  if (!upload.ok()) return upload.status();
  do {
    if (!msg.data().empty()) {
      if (absl::Status st = (*upload)->Append(msg.data()); !st.ok()) return st;
    }
  } while (reader->Read(&msg));
  if (absl::Status st = (*upload)->Commit(); !st.ok()) return st;
  LogInfo("artifact sha256:", sha256, " stored (", resp->size(), " bytes)");
  resp->set_created(true);
  return absl::OkStatus();
}

grpc::Status ArtifactServiceImpl::FetchArtifact(
    grpc::ServerContext* ctx, const v1::FetchArtifactRequest* req,
    grpc::ServerWriter<v1::FetchArtifactResponse>* writer) {
  absl::StatusOr<Principal> caller = CallerOf(auth_, *ctx, Role::kWorker, "fetch artifacts");
  if (!caller.ok()) return Done("FetchArtifact", caller.status());
  if (store_ == nullptr) return Done("FetchArtifact", NoStore());
  bool first = true;
  absl::Status st = store_->Read(req->sha256(), kChunkBytes,
                                 [&](uint64_t total, absl::string_view chunk) {
                                   v1::FetchArtifactResponse out;
                                   if (first) out.set_size(total);
                                   first = false;
                                   out.set_data(std::string(chunk));
                                   return writer->Write(out);
                                 });
  return Done("FetchArtifact", st);
}

absl::flat_hash_map<std::string, absl::Time> ArtifactsInUse(const JobManager& manager) {
  absl::flat_hash_map<std::string, absl::Time> out;
  std::string token;
  do {
    absl::StatusOr<ListResult> page = manager.List({}, 1000, token);
    if (!page.ok()) break;
    for (const JobView& view : page->jobs) {
      const JobRecord& job = view.record;
      const absl::Time until =
          IsTerminal(job.state) ? job.end_time : absl::InfiniteFuture();
      for (const std::string& digest : ArtifactDigests(job.spec)) {
        auto [it, inserted] = out.emplace(digest, until);
        if (!inserted) it->second = std::max(it->second, until);
      }
    }
    token = page->next_page_token;
  } while (!token.empty());
  return out;
}

void SweepArtifacts(const ArtifactStore& store, const JobManager& manager, absl::Time now) {
  const int deleted = store.Sweep(ArtifactsInUse(manager), now);
  if (deleted > 0) {
    LogInfo("artifacts: deleted ", deleted, " that no job needs any more (--artifact-retention ",
            absl::FormatDuration(store.options().retention), ")");
  }
}

}  // namespace zpipe::coordinator
