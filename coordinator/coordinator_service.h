// CoordinatorServiceImpl: the client-facing gRPC service (zpipe.v1.CoordinatorService).
// Authenticates each call (auth.h: every method needs a client or admin token; a client cancels
// only the jobs it submitted), decodes requests, calls JobManager, encodes replies and maps
// statuses; no job logic here.
#ifndef ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_
#define ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_

#include "coordinator/artifact_store.h"
#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "zpipe/v1/coordinator.grpc.pb.h"

namespace zpipe::coordinator {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  // All three must outlive the service.
  // `artifacts` (may be null: no artifact store) is what a spec naming "artifact:sha256:..."
  // files is checked against at submit (artifact_store.h CheckSpec).
  CoordinatorServiceImpl(JobManager& manager, Metrics& metrics, const Authenticator& auth,
                         const ArtifactStore* artifacts = nullptr)
      : manager_(manager), metrics_(metrics), auth_(auth), artifacts_(artifacts) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetPlan(grpc::ServerContext* ctx, const v1::GetPlanRequest* req,
                       v1::GetPlanResponse* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status GetTrace(grpc::ServerContext* ctx, const v1::GetTraceRequest* req,
                        v1::GetTraceResponse* resp) override;
  grpc::Status GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                          grpc::ServerWriter<v1::GetJobLogsResponse>* writer) override;
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest* req,
                             v1::ServerInfo* resp) override;

 private:
  grpc::Status Done(absl::string_view method, const absl::Status& status);
  absl::Status Watch(grpc::ServerContext* ctx, const v1::WatchJobRequest& req,
                     grpc::ServerWriter<v1::JobEvent>* writer);

  // The caller, when its token's role may make `call` (a client-role call).
  absl::StatusOr<Principal> Caller(grpc::ServerContext* ctx, absl::string_view call) const;
  // For a stream already open: OK while its token still may make `call`; once a reload (SIGHUP)
  // removed the token, the error that closes the stream ("stream closed: ...").
  absl::Status StillAllowed(grpc::ServerContext* ctx, absl::string_view call) const;
  // How often an open stream checks StillAllowed.
  static constexpr absl::Duration kStreamAuthInterval = absl::Milliseconds(500);
  // OK when `caller` may change job `job_id` (`verb`: "cancel", "delete"): a client its own jobs
  // only, an admin (and an open coordinator's caller) any. NotFound for an unknown job.
  absl::Status CheckOwner(const Principal& caller, const std::string& job_id,
                          absl::string_view verb) const;

  JobManager& manager_;
  Metrics& metrics_;
  const Authenticator& auth_;
  const ArtifactStore* artifacts_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_
