#include "worker/daemon/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace zpipe::worker {
namespace {

absl::Status FromGrpc(const grpc::Status& st, absl::string_view what) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat("rendezvous ", what, ": ", st.error_message()));
}

class GrpcRendezvousStore : public KeyValueStore {
 public:
  GrpcRendezvousStore(zpipe::v1::WorkerService::StubInterface& stub, std::string job_id,
                      RendezvousCaller caller)
      : stub_(stub), job_id_(std::move(job_id)), caller_(std::move(caller)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    zpipe::v1::RendezvousSetRequest req;
    req.set_job_id(job_id_);
    req.set_instance_id(caller_.instance_id);
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    zpipe::v1::RendezvousSetResponse resp;
    return FromGrpc(stub_.RendezvousSet(&ctx, req, &resp), "set");
  }

  absl::StatusOr<std::string> Get(absl::string_view key) override {
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    zpipe::v1::RendezvousGetRequest req;
    req.set_job_id(job_id_);
    req.set_instance_id(caller_.instance_id);
    req.set_key(std::string(key));
    zpipe::v1::RendezvousGetResponse resp;
    if (absl::Status st = FromGrpc(stub_.RendezvousGet(&ctx, req, &resp), "get"); !st.ok()) {
      return st;
    }
    return resp.value();
  }

  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Time deadline) override {
    grpc::ClientContext ctx;
    Authorize(ctx);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    zpipe::v1::RendezvousWaitRequest req;
    req.set_job_id(job_id_);
    req.set_instance_id(caller_.instance_id);
    for (const auto& k : keys) req.add_keys(k);
    const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    req.mutable_timeout()->set_seconds(absl::ToInt64Seconds(left));
    req.mutable_timeout()->set_nanos(static_cast<int32_t>(
        absl::ToInt64Nanoseconds(left - absl::Seconds(absl::ToInt64Seconds(left)))));
    zpipe::v1::RendezvousWaitResponse resp;
    if (absl::Status st = FromGrpc(stub_.RendezvousWait(&ctx, req, &resp), "wait"); !st.ok()) {
      return st;
    }
    return std::vector<std::string>(resp.values().begin(), resp.values().end());
  }

 private:
  void Authorize(grpc::ClientContext& ctx) const {
    if (!caller_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + caller_.token);
  }

  zpipe::v1::WorkerService::StubInterface& stub_;
  const std::string job_id_;
  const RendezvousCaller caller_;
};

}  // namespace

std::unique_ptr<KeyValueStore> NewGrpcRendezvousStore(zpipe::v1::WorkerService::StubInterface& stub,
                                                      std::string job_id, RendezvousCaller caller) {
  return std::make_unique<GrpcRendezvousStore>(stub, std::move(job_id), std::move(caller));
}

}  // namespace zpipe::worker
