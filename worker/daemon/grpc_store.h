// KeyValueStore over the coordinator's per-job rendezvous (WorkerService.Rendezvous*).
#ifndef ZPIPE_WORKER_DAEMON_GRPC_STORE_H_
#define ZPIPE_WORKER_DAEMON_GRPC_STORE_H_

#include <memory>
#include <string>

#include "worker/comm/key_value_store.h"
#include "zpipe/v1/worker.grpc.pb.h"

namespace zpipe::worker {

// Who the calls come from: the worker process's instance_id and its token (`authorization:
// Bearer TOKEN`; empty = none), as it registered.
struct RendezvousCaller {
  std::string instance_id;
  std::string token;
};

// `stub` must outlive the store. Keys are used as given (the communicator adds the job attempt's
// prefix). Each call is one RPC; Wait polls nothing (the coordinator blocks server-side).
std::unique_ptr<KeyValueStore> NewGrpcRendezvousStore(zpipe::v1::WorkerService::StubInterface& stub,
                                                      std::string job_id,
                                                      RendezvousCaller caller = {});

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_GRPC_STORE_H_
