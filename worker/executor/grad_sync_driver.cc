#include "worker/executor/grad_sync_driver.h"

#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/model/param_info.h"

namespace zpipe::worker {
namespace {

// Counts per parameter, as each gradient lands (the stages' gradient observers), so a bucket's
// all-reduce launches partway through the W that completes it rather than after the whole
// action; OnCompute reports what the observers ran into. A stage that does not report landings
// is counted per action in OnCompute instead, after the action.
class Driver : public GradSyncDriver {
 public:
  Driver(std::unique_ptr<GradSync> sync, const std::vector<std::unique_ptr<model::Stage>>& stages)
      : sync_(std::move(sync)), state_(std::make_shared<State>()) {
    state_->sync = sync_.get();
    for (const BucketLayout& b : sync_->buckets()) {
      const model::Stage* stage = nullptr;
      for (const auto& st : stages) {
        if (st->stage() == b.stage) stage = st.get();
      }
      std::vector<torch::Tensor>& params = bucket_params_.emplace_back();
      for (int i : b.params) params.push_back(stage->params().at(i).tensor);
    }
    for (const auto& st : stages) {
      if (!st->reports_grad_landings()) {
        per_action_.insert(st->stage());
        continue;
      }
      std::vector<bool> counted;
      for (const model::ParamInfo& p : st->params()) counted.push_back(p.tensor.numel() > 0);
      // Shares `state_` rather than pointing at the driver: the stages may outlive it (the
      // executor owning them may be destroyed after or before the driver).
      st->SetGradObserver(
          [state = state_, stage = st->stage(), counted = std::move(counted)](int param) {
            // Parameters without elements have no bucket (PackBuckets leaves them out).
            if (state->sync == nullptr || param < 0 || param >= static_cast<int>(counted.size()) ||
                !counted[param]) {
              return;
            }
            absl::Status s = state->sync->OnContribution(stage, param);
            if (!s.ok() && state->error.ok()) state->error = s;
          });
    }
  }
  ~Driver() override { state_->sync = nullptr; }

  absl::Status BeginIteration(int) override {
    state_->error = absl::OkStatus();
    taken_ = 0;
    return sync_->BeginIteration();
  }

  absl::Status OnCompute(const core::Action& action) override {
    absl::Status s = state_->error;
    state_->error = absl::OkStatus();
    if (per_action_.count(action.stage) > 0) {
      absl::Status counted = sync_->OnActionDone(action);
      if (s.ok()) s = counted;
    }
    return s;
  }

  absl::Status OnReduceAction(int chunk, int bucket) override {
    // The plan's REDUCE points come from the coordinator's bucket layout, which may differ
    // from the one packed here from the real parameters; launching never depends on them (the
    // countdown does), so only buckets this rank has are checked.
    absl::Status st = sync_->ExpectLaunched(chunk, bucket);
    if (st.code() == absl::StatusCode::kInvalidArgument) return absl::OkStatus();
    return st;
  }

  std::vector<Launched> TakeLaunched() override {
    std::vector<Launched> out;
    for (; taken_ < sync_->launched(); ++taken_) {
      const BucketLayout& b = sync_->buckets()[taken_];
      out.push_back({b.stage, bucket_params_[taken_], sync_->handle(taken_)});
    }
    return out;
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
  struct State {
    GradSync* sync = nullptr;  // null once the driver is gone
    absl::Status error;        // the first counting error since the last OnCompute
  };
  std::unique_ptr<GradSync> sync_;
  std::shared_ptr<State> state_;
  std::set<int> per_action_;  // stages counted per action (no landing reports)
  std::vector<std::vector<torch::Tensor>> bucket_params_;  // by slot (launch order)
  int taken_ = 0;                                          // slots TakeLaunched has returned
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradSyncDriver>> NewGradSyncDriver(
    const core::Plan& plan, int pipeline_rank,
    const std::vector<std::unique_ptr<model::Stage>>& stages, const GradSyncOptions& options,
    Communicator& comm) {
  std::vector<std::vector<model::ParamInfo>> params;
  for (const auto& st : stages) params.push_back(st->params());
  auto sync = GradSync::Create(plan, pipeline_rank, std::move(params), options, comm);
  if (!sync.ok()) return sync.status();
  for (const auto& st : stages) {
    if (absl::Status s = (*sync)->AttachGrads(st->stage(), model::ParamTensors(st->params()));
        !s.ok()) {
      return s;
    }
  }
  return std::unique_ptr<GradSyncDriver>(new Driver(*std::move(sync), stages));
}

}  // namespace zpipe::worker
