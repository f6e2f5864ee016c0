// CoordinatorServiceImpl: the client-facing gRPC service (zpipe.v1.CoordinatorService).
// Decodes requests, calls JobManager, encodes replies and maps statuses; no job logic here.
#ifndef ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_
#define ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_

#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "zpipe/v1/coordinator.grpc.pb.h"

namespace zpipe::coordinator {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  CoordinatorServiceImpl(JobManager& manager, Metrics& metrics)
      : manager_(manager), metrics_(metrics) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetPlan(grpc::ServerContext* ctx, const v1::GetPlanRequest* req,
                       v1::GetPlanResponse* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status GetTrace(grpc::ServerContext* ctx, const v1::GetTraceRequest* req,
                        v1::GetTraceResponse* resp) override;

 private:
  grpc::Status Done(absl::string_view method, const absl::Status& status);
  absl::Status Watch(grpc::ServerContext* ctx, const v1::WatchJobRequest& req,
                     grpc::ServerWriter<v1::JobEvent>* writer);

  JobManager& manager_;
  Metrics& metrics_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_COORDINATOR_SERVICE_H_
