// WorkerServiceImpl: the worker-facing gRPC service (zpipe.v1.WorkerService): registration, the
// per-worker Session stream, and rendezvous. Authenticates (a worker token; with tokens, a
// worker reports for and uses the rendezvous of only the jobs it holds a rank of), decodes,
// calls JobManager, encodes; no job logic.
#ifndef ZPIPE_COORDINATOR_WORKER_SERVICE_H_
#define ZPIPE_COORDINATOR_WORKER_SERVICE_H_

#include "coordinator/auth.h"
#include "coordinator/job_manager.h"
#include "coordinator/metrics.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::coordinator {

// Session is served by gRPC's callback API (a reactor per worker, no thread of its own); the unary
// calls by the synchronous one.
class WorkerServiceImpl final
    : public v1::WorkerService::WithCallbackMethod_Session<v1::WorkerService::Service> {
 public:
  // All three must outlive the service.
  WorkerServiceImpl(JobManager& manager, Metrics& metrics, const Authenticator& auth)
      : manager_(manager), metrics_(metrics), auth_(auth) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* ctx) override;
  grpc::Status RendezvousSet(grpc::ServerContext* ctx, const v1::RendezvousSetRequest* req,
                             v1::RendezvousSetResponse* resp) override;
  grpc::Status RendezvousGet(grpc::ServerContext* ctx, const v1::RendezvousGetRequest* req,
                             v1::RendezvousGetResponse* resp) override;
  grpc::Status RendezvousWait(grpc::ServerContext* ctx, const v1::RendezvousWaitRequest* req,
                              v1::RendezvousWaitResponse* resp) override;

 private:
  grpc::Status Done(absl::string_view method, const absl::Status& status);
  // The caller of a rendezvous call on `job_id`: a worker token whose worker (by instance_id)
  // holds a rank of the job.
  absl::Status CheckRendezvous(grpc::ServerContext* ctx, const std::string& job_id,
                               const std::string& instance_id) const;

  JobManager& manager_;
  Metrics& metrics_;
  const Authenticator& auth_;
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_WORKER_SERVICE_H_
