#include "worker/daemon/report_outbox.h"

#include <algorithm>
#include <utility>

namespace zpipe::worker {

const std::string* ReportedJob(const zpipe::v1::WorkerMessage& m) {
  switch (m.kind_case()) {
    case zpipe::v1::WorkerMessage::kIteration:
      return &m.iteration().job_id();
    case zpipe::v1::WorkerMessage::kProgress:
      return &m.progress().job_id();
    case zpipe::v1::WorkerMessage::kFinished:
      return &m.finished().job_id();
    case zpipe::v1::WorkerMessage::kFailure:
      return &m.failure().job_id();
    case zpipe::v1::WorkerMessage::kProfileResult:
      return &m.profile_result().job_id();
    default:
      return nullptr;
  }
}

void ReportOutbox::Push(zpipe::v1::WorkerMessage message) {
  if (ReportedJob(message) == nullptr) return;
  const size_t size = message.ByteSizeLong();
  while (!messages_.empty() && bytes_ + size > capacity_bytes_) {
    auto victim = std::find_if(messages_.begin(), messages_.end(),
                               [](const zpipe::v1::WorkerMessage& m) { return m.has_progress(); });
    Erase(victim != messages_.end() ? victim : messages_.begin());
    ++dropped_;
  }
  bytes_ += size;
  messages_.push_back(std::move(message));
}

void ReportOutbox::PopFront() { Erase(messages_.begin()); }

size_t ReportOutbox::RetainJob(const std::string& job_id) {
  size_t removed = 0;
  for (auto it = messages_.begin(); it != messages_.end();) {
    const std::string* job = ReportedJob(*it);
    if (job_id.empty() || job == nullptr || *job != job_id) {
      bytes_ -= std::min(bytes_, it->ByteSizeLong());
      it = messages_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

bool ReportOutbox::HasFinished(const std::string& job_id) const {
  return std::any_of(messages_.begin(), messages_.end(), [&](const zpipe::v1::WorkerMessage& m) {
    return m.has_finished() && m.finished().job_id() == job_id;
  });
}

uint64_t ReportOutbox::TakeDropped() { return std::exchange(dropped_, 0); }

void ReportOutbox::Erase(std::deque<zpipe::v1::WorkerMessage>::iterator it) {
  bytes_ -= std::min(bytes_, it->ByteSizeLong());
  messages_.erase(it);
}

}  // namespace zpipe::worker
