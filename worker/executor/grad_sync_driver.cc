#include "worker/executor/grad_sync_driver.h"

#include "absl/strings/str_cat.h"
#include "worker/grad_sync/model_params.h"

namespace zpipe::worker {
namespace {

class Driver : public GradSyncDriver {
 public:
  explicit Driver(std::unique_ptr<GradSync> sync) : sync_(std::move(sync)) {}

  absl::Status BeginIteration(int) override { return sync_->BeginIteration(); }

  absl::Status OnCompute(const core::Action& action) override {
    return sync_->OnActionDone(action);
  }

  absl::Status OnReduceAction(int chunk, int bucket) override {
    // The plan's REDUCE points come from the coordinator's bucket layout, which may differ
    // from the one packed here from the real parameters; launching never depends on them (the
    // countdown does), so only buckets this rank has are checked.
    absl::Status st = sync_->ExpectLaunched(chunk, bucket);
    if (st.code() == absl::StatusCode::kInvalidArgument) return absl::OkStatus();
    return st;
  }

  absl::StatusOr<std::vector<ReduceInterval>> FinishIteration() override {
    if (absl::Status st = sync_->FinishIteration(); !st.ok()) return st;
    std::vector<ReduceInterval> out;
    for (const BucketRecord& r : sync_->records()) {
      out.push_back({r.chunk, r.bucket, r.launch_time, r.start_time, r.end_time});
    }
    return out;
  }

 private:
  std::unique_ptr<GradSync> sync_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradSyncDriver>> NewGradSyncDriver(
    const core::Plan& plan, int pipeline_rank,
    const std::vector<std::unique_ptr<model::Stage>>& stages, const GradSyncOptions& options,
    Communicator& comm) {
  std::vector<std::vector<ParamInfo>> params;
  for (const auto& st : stages) params.push_back(ParamsFromModel(st->params()));
  auto sync = GradSync::Create(plan, pipeline_rank, std::move(params), options, comm);
  if (!sync.ok()) return sync.status();
  for (const auto& st : stages) {
    if (absl::Status s = (*sync)->AttachGrads(st->stage(), TensorsFromModel(st->params()));
        !s.ok()) {
      return s;
    }
  }
  return std::unique_ptr<GradSyncDriver>(new Driver(*std::move(sync)));
}

}  // namespace zpipe::worker
