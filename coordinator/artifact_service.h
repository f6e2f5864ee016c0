// ArtifactServiceImpl: the gRPC edge of the artifact store (zpipe.v1.ArtifactService,
// proto/zpipe/v1/artifact.proto). UploadArtifact needs the role that submits jobs (client or
// admin), FetchArtifact a worker token (auth.h). Chunks go straight between the stream and the
// store's files, so neither call holds more than one chunk in memory.
//
// ArtifactsInUse and SweepArtifacts tie the store to the job records: jobs are never deleted, so
// an artifact is deleted once the jobs that name it have ended (artifact_store.h, Sweep).
#ifndef ZPIPE_COORDINATOR_ARTIFACT_SERVICE_H_
#define ZPIPE_COORDINATOR_ARTIFACT_SERVICE_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "coordinator/artifact_store.h"
#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "zpipe/v1/artifact.grpc.pb.h"

namespace zpipe::coordinator {

class ArtifactServiceImpl final : public v1::ArtifactService::Service {
 public:
  // `store` may be null (no --artifact-dir): every call is then UNAVAILABLE saying so. All must
  // outlive the service.
  ArtifactServiceImpl(const ArtifactStore* store, Metrics& metrics, const Authenticator& auth)
      : store_(store), metrics_(metrics), auth_(auth) {}

  grpc::Status UploadArtifact(grpc::ServerContext* ctx,
                              grpc::ServerReader<v1::UploadArtifactRequest>* reader,
                              v1::UploadArtifactResponse* resp) override;
  grpc::Status FetchArtifact(grpc::ServerContext* ctx, const v1::FetchArtifactRequest* req,
                             grpc::ServerWriter<v1::FetchArtifactResponse>* writer) override;

  // Bytes per FetchArtifact message.
  static constexpr size_t kChunkBytes = 1 << 20;

 private:
  grpc::Status Done(absl::string_view method, const absl::Status& status);
  absl::Status Upload(grpc::ServerReader<v1::UploadArtifactRequest>* reader,
                      v1::UploadArtifactResponse* resp);

  const ArtifactStore* store_;
  Metrics& metrics_;
  const Authenticator& auth_;
};

// Digest -> until when a job needs it: InfiniteFuture while a job naming it is not terminal,
// else the latest end time of the jobs naming it.
absl::flat_hash_map<std::string, absl::Time> ArtifactsInUse(const JobManager& manager);

// Deletes the artifacts no job needs any more (ArtifactStore::Sweep), logging how many.
void SweepArtifacts(const ArtifactStore& store, const JobManager& manager, absl::Time now);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_ARTIFACT_SERVICE_H_
