#include "client/fake_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"

namespace zpipe {

class FakeClient::FakeJobWatch : public JobWatch {
 public:
  FakeJobWatch(FakeClient& fake, std::string job_id, uint64_t after)
      : fake_(fake), job_id_(std::move(job_id)), last_(after) {}

  absl::StatusOr<std::optional<v1::JobEvent>> Next() override {
    absl::MutexLock lock(&fake_.mu_);
    if (absl::Status s = fake_.CheckReachable(); !s.ok()) return s;
    auto it = fake_.jobs_.find(job_id_);
    if (it == fake_.jobs_.end())
      return absl::NotFoundError(absl::StrCat("job '", job_id_, "' not found"));
    if (!sent_snapshot_ && last_ == 0) {
      sent_snapshot_ = true;
      const JobEntry& e = it->second;
      v1::JobEvent snap;
      snap.set_sequence(e.events.empty() ? 0 : e.events.back().sequence());
      *snap.mutable_snapshot() = e.job;
      last_ = snap.sequence();
      next_ = e.events.size();  // the snapshot covers everything so far
      ended_ = IsTerminal(e.job.state());
      return std::optional<v1::JobEvent>(std::move(snap));
    }
    while (true) {
      if (cancelled_) return absl::CancelledError("watch cancelled");
      if (ended_) return std::optional<v1::JobEvent>();
      const std::vector<v1::JobEvent>& events = it->second.events;
      for (size_t i = next_; i < events.size(); ++i) {
        next_ = i + 1;
        if (events[i].sequence() <= last_ && !events[i].has_progress()) continue;
        last_ = std::max(last_, events[i].sequence());
        if (events[i].has_state_change() && IsTerminal(events[i].state_change().to()))
          ended_ = true;
        return std::optional<v1::JobEvent>(events[i]);
      }
      fake_.changed_.Wait(&fake_.mu_);
    }
  }

  void Cancel() override {
    absl::MutexLock lock(&fake_.mu_);
    cancelled_ = true;
    fake_.changed_.SignalAll();
  }

  uint64_t last_sequence() const override { return last_; }

 private:
  FakeClient& fake_;
  const std::string job_id_;
  uint64_t last_;
  size_t next_ = 0;
  bool sent_snapshot_ = false;
  bool ended_ = false;
  bool cancelled_ ABSL_GUARDED_BY(fake_.mu_) = false;  // Cancel() runs on another thread
};

absl::Status FakeClient::CheckReachable() const {
  if (unavailable_) return absl::UnavailableError("failed to connect to all addresses (fake)");
  return absl::OkStatus();
}

void FakeClient::SetUnavailable(bool unavailable) {
  absl::MutexLock lock(&mu_);
  unavailable_ = unavailable;
  changed_.SignalAll();
}

void FakeClient::AppendLocked(JobEntry& entry, v1::JobEvent event) {
  const uint64_t last = entry.events.empty() ? 0 : entry.events.back().sequence();
  event.set_sequence(event.has_progress() ? last : last + 1);
  entry.events.push_back(std::move(event));
  changed_.SignalAll();
}

bool FakeClient::ChangeStateLocked(JobEntry& entry, v1::JobState state, const std::string& reason) {
  v1::JobEvent event;
  event.mutable_state_change()->set_from(entry.job.state());
  event.mutable_state_change()->set_to(state);
  event.mutable_state_change()->set_reason(reason);
  entry.job.set_state(state);
  entry.job.set_reason(reason);
  AppendLocked(entry, std::move(event));
  return true;
}

bool FakeClient::SetState(const std::string& job_id, v1::JobState state,
                          const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it != jobs_.end() && ChangeStateLocked(it->second, state, reason);
}

bool FakeClient::EditJob(const std::string& job_id, const std::function<void(v1::Job&)>& edit) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  edit(it->second.job);
  return true;
}

bool FakeClient::AddEvent(const std::string& job_id, v1::JobEvent event) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  if (event.has_iteration()) *it->second.job.mutable_latest_summary() = event.iteration();
  if (event.has_progress()) *it->second.job.mutable_progress() = event.progress();
  AppendLocked(it->second, std::move(event));
  return true;
}

void FakeClient::SetPlan(const std::string& job_id, JobPlan plan) {
  absl::MutexLock lock(&mu_);
  plans_[job_id] = std::move(plan);
}

void FakeClient::SetWorkers(std::vector<v1::Worker> workers) {
  absl::MutexLock lock(&mu_);
  workers_ = std::move(workers);
}

absl::StatusOr<SubmitResult> FakeClient::Submit(const v1::JobSpec& spec, const std::string& job_id,
                                                bool validate_only) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  if (spec.parallel().pipeline() < 1) {
    return absl::InvalidArgumentError("spec.parallel.pipeline: must be >= 1");
  }
  if (validate_only) {
    SubmitResult r;
    *r.job.mutable_spec() = spec;
    return r;
  }
  const std::string id = job_id.empty() ? absl::StrCat("job-", next_id_++) : job_id;
  if (auto it = jobs_.find(id); it != jobs_.end()) {
    if (!google::protobuf::util::MessageDifferencer::Equals(it->second.job.spec(), spec)) {
      return absl::AlreadyExistsError(absl::StrCat("job '", id, "' exists with a different spec"));
    }
    return SubmitResult{it->second.job, false};
  }
  JobEntry& entry = jobs_[id];
  entry.job.set_id(id);
  *entry.job.mutable_spec() = spec;
  entry.job.set_state(v1::JOB_STATE_PENDING);
  entry.job.mutable_progress()->set_iterations_total(spec.train().iterations());
  order_.push_back(id);
  return SubmitResult{entry.job, true};
}

absl::StatusOr<v1::Job> FakeClient::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  return it->second.job;
}

absl::StatusOr<JobPage> FakeClient::List(const ListJobsOptions& options) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  size_t start = 0;
  if (!options.page_token.empty() && !absl::SimpleAtoi(options.page_token, &start)) {
    return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
  }
  const size_t page_size = options.page_size > 0 ? options.page_size : 100;
  JobPage page;
  for (size_t i = start; i < order_.size(); ++i) {
    const v1::Job& job = jobs_[order_[i]].job;
    if (!options.states.empty() && std::find(options.states.begin(), options.states.end(),
                                             job.state()) == options.states.end()) {
      continue;
    }
    if (absl::FromUnixSeconds(job.create_time().seconds()) +
            absl::Nanoseconds(job.create_time().nanos()) <
        options.created_after) {
      continue;
    }
    bool labelled = true;
    for (const auto& [key, value] : options.labels) {
      auto it = job.spec().labels().find(key);
      labelled = labelled && it != job.spec().labels().end() && it->second == value;
    }
    if (!labelled) continue;
    if (page.jobs.size() == page_size) {
      page.next_page_token = std::to_string(i);
      break;
    }
    page.jobs.push_back(job);
  }
  return page;
}

absl::StatusOr<v1::Job> FakeClient::Cancel(const std::string& job_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  v1::Job& job = it->second.job;
  if (job.state() == v1::JOB_STATE_CANCELLED) return job;
  if (IsTerminal(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id, "' is ", JobStateName(job.state())));
  }
  ChangeStateLocked(it->second, v1::JOB_STATE_CANCELLED,
                    reason.empty() ? "cancelled by user" : reason);
  return job;
}

absl::StatusOr<v1::JobState> FakeClient::Delete(const std::string& job_id, bool force) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  if (!IsTerminal(it->second.job.state())) {
    if (!force) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' is ", JobStateName(it->second.job.state()),
                       "; add --force to cancel it and delete it"));
    }
    ChangeStateLocked(it->second, v1::JOB_STATE_CANCELLED, "cancelled to be deleted");
  }
  const v1::JobState state = it->second.job.state();
  jobs_.erase(it);
  order_.erase(std::remove(order_.begin(), order_.end(), job_id), order_.end());
  return state;
}

std::unique_ptr<JobWatch> FakeClient::Watch(const std::string& job_id, WatchOptions options) {
  return std::make_unique<FakeJobWatch>(*this, job_id, options.after_sequence);
}

absl::StatusOr<JobPlan> FakeClient::Plan(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  if (!jobs_.count(job_id))
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  auto it = plans_.find(job_id);
  if (it == plans_.end())
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' has no plan yet"));
  return it->second;
}

absl::StatusOr<WorkerPage> FakeClient::ListWorkers(const ListWorkersOptions& options) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  // As the coordinator: by name, after the page token (the previous page's last name).
  std::vector<v1::Worker> sorted = workers_;
  std::sort(sorted.begin(), sorted.end(),
            [](const v1::Worker& a, const v1::Worker& b) { return a.name() < b.name(); });
  const int page_size = options.page_size <= 0 ? 500 : std::min(options.page_size, 1000);
  WorkerPage page;
  for (const v1::Worker& w : sorted) {
    if (!options.include_dead && w.state() == v1::WORKER_STATE_DEAD) continue;
    if (!options.page_token.empty() && w.name() <= options.page_token) continue;
    if (static_cast<int>(page.workers.size()) == page_size) {
      page.next_page_token = page.workers.back().name();
      break;
    }
    page.workers.push_back(w);
  }
  return page;
}

}  // namespace zpipe
