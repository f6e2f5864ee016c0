#include "worker/daemon/plan_switch.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace zpipe::worker {
namespace {

std::string AnswerKey(int version, int global_rank) {
  return absl::StrCat("plan/v", version, "/", global_rank);
}

}  // namespace

void PlanUpdateChannel::Deliver(const PlanUpdate& update) {
  absl::MutexLock lock(&mu_);
  if (handler_) {
    handler_(update);
  } else {
    kept_.push_back(update);
  }
}

void PlanUpdateChannel::Attach(Handler handler) {
  absl::MutexLock lock(&mu_);
  handler_ = std::move(handler);
  if (!handler_) return;
  for (const PlanUpdate& u : std::exchange(kept_, {})) handler_(u);
}

PlanSwitcher::PlanSwitcher(KeyValueStore& store, const core::Plan& current, int version,
                           int attempt, int global_rank, int world_size, absl::Duration timeout)
    : store_(store),
      num_ranks_(current.num_ranks()),
      num_stages_(current.num_stages()),
      num_microbatches_(current.num_microbatches),
      chunks_(current.placement.chunks_per_rank()),
      attempt_(attempt),
      global_rank_(global_rank),
      world_size_(world_size),
      timeout_(timeout),
      version_(version) {}

int PlanSwitcher::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void PlanSwitcher::Offer(const PlanUpdate& update) {
  absl::MutexLock lock(&mu_);
  if (update.attempt != attempt_ || update.plan_version <= version_) return;
  const bool in_time = started_ < update.switch_iteration;
  // Under the lock: the job thread cannot start the switch iteration between this answer and
  // pending_ being set.
  absl::Status st =
      store_.Set(AnswerKey(update.plan_version, global_rank_), in_time ? "ok" : "late");
  if (!st.ok()) {
    LogWarning("plan v", update.plan_version, ": cannot answer: ", st.ToString());
    return;
  }
  if (in_time) pending_ = update;
}

absl::StatusOr<std::optional<PlanSwitch>> PlanSwitcher::BeforeIteration(int iteration) {
  PlanUpdate u;
  {
    absl::MutexLock lock(&mu_);
    started_ = iteration;
    if (!pending_ || iteration < pending_->switch_iteration) return std::nullopt;
    u = *std::move(pending_);
    pending_.reset();
  }
  std::vector<std::string> keys;
  for (int g = 0; g < world_size_; ++g) keys.push_back(AnswerKey(u.plan_version, g));
  absl::StatusOr<std::vector<std::string>> answers = store_.Wait(keys, absl::Now() + timeout_);
  if (!answers.ok()) {
    return absl::Status(
        answers.status().code(),
        absl::StrCat("plan v", u.plan_version, " at iteration ", iteration,
                     ": waiting for every rank's answer: ", answers.status().message()));
  }
  for (const std::string& a : *answers) {
    if (a != "ok") return std::nullopt;  // a rank was late: every rank keeps the current plan
  }
  absl::StatusOr<core::Plan> plan = core::ParsePlanText(u.plan_text);
  if (!plan.ok()) {
    return absl::InternalError(
        absl::StrCat("plan v", u.plan_version, ": ", plan.status().message()));
  }
  if (plan->num_ranks() != num_ranks_ || plan->num_stages() != num_stages_ ||
      plan->num_microbatches != num_microbatches_ || plan->placement.chunks_per_rank() != chunks_) {
    return absl::InternalError(
        absl::StrCat("plan v", u.plan_version, " has another shape than the running plan"));
  }
  absl::MutexLock lock(&mu_);
  version_ = u.plan_version;
  return PlanSwitch{*std::move(plan), version_};
}

}  // namespace zpipe::worker
