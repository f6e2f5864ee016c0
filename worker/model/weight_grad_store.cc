#include "worker/model/weight_grad_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {

absl::Status WeightGradStore::Open(int mb) {
  absl::MutexLock lock(&mu_);
  if (!pending_.try_emplace(mb).second) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage_, " microbatch ", mb,
                     ": B ran again before W consumed the previous weight gradients"));
  }
  return absl::OkStatus();
}

absl::Status WeightGradStore::Push(int mb, Closure closure, std::vector<int> params) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(mb);
  if (it == pending_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage_, " microbatch ", mb,
                     ": weight-gradient work queued outside B (store not open)"));
  }
  it->second.push_back(Work{std::move(closure), std::move(params)});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WeightGradStore::Work>> WeightGradStore::Take(int mb) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(mb);
  if (it == pending_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage_, " microbatch ", mb,
                     ": W has no pending weight gradients (W without B, or W twice)"));
  }
  std::vector<Work> out = std::move(it->second);
  pending_.erase(it);
  return out;
}

void WeightGradStore::Drop(int mb) {
  absl::MutexLock lock(&mu_);
  pending_.erase(mb);
}

void WeightGradStore::Clear() {
  absl::MutexLock lock(&mu_);
  pending_.clear();
}

bool WeightGradStore::Contains(int mb) const {
  absl::MutexLock lock(&mu_);
  return pending_.count(mb) > 0;
}

int WeightGradStore::pending_microbatches() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(pending_.size());
}

int WeightGradStore::pending_closures() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [mb, closures] : pending_) n += static_cast<int>(closures.size());
  return n;
}

}  // namespace zpipe::worker::model
