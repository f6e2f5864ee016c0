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
    case zpipe::v1::WorkerMessage::kLog:
      return &m.log().job_id();
    default:
      return nullptr;
  }
}

void ReportOutbox::Push(zpipe::v1::WorkerMessage message) {
  if (ReportedJob(message) == nullptr) return;
  const size_t size = message.ByteSizeLong();
  DropForRoom(size);
  bytes_ += size;
  if (message.has_log()) log_lines_ += message.log().lines_size();
  messages_.push_back(std::move(message));
  if (messages_.back().has_log()) TrimLogLines();
  CarryDroppedLines();
}

void ReportOutbox::Prepend(std::vector<zpipe::v1::WorkerMessage> messages) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (ReportedJob(*it) == nullptr) continue;
    bytes_ += it->ByteSizeLong();
    messages_.push_front(std::move(*it));
  }
  DropForRoom(0);
}

void ReportOutbox::DropForRoom(size_t incoming) {
  while (!messages_.empty() && bytes_ + incoming > capacity_bytes_) {
    auto victim = std::find_if(
        messages_.begin(), messages_.end(),
        [](const zpipe::v1::WorkerMessage& m) { return m.has_progress() || m.has_log(); });
    Erase(victim != messages_.end() ? victim : messages_.begin(), /*dropped=*/true);
    ++dropped_;
  }
}

void ReportOutbox::TrimLogLines() {
  auto it = messages_.begin();
  while (log_lines_ > max_log_lines_ && it != messages_.end()) {
    if (!it->has_log()) {
      ++it;
      continue;
    }
    zpipe::v1::JobLogBatch* batch = it->mutable_log();
    const size_t excess = log_lines_ - max_log_lines_;
    const int cut = static_cast<int>(std::min<size_t>(excess, batch->lines_size()));
    if (cut == batch->lines_size()) {
      dropped_log_lines_ += batch->dropped_lines() + cut;
      log_lines_ -= cut;
      bytes_ -= std::min(bytes_, it->ByteSizeLong());
      it = messages_.erase(it);
      continue;
    }
    const size_t before = it->ByteSizeLong();
    batch->mutable_lines()->DeleteSubrange(0, cut);
    batch->set_dropped_lines(batch->dropped_lines() + cut);
    log_lines_ -= cut;
    bytes_ -= std::min(bytes_, before - it->ByteSizeLong());
    ++it;
  }
}

void ReportOutbox::CarryDroppedLines() {
  if (dropped_log_lines_ == 0) return;
  for (zpipe::v1::WorkerMessage& m : messages_) {
    if (!m.has_log()) continue;
    const size_t before = m.ByteSizeLong();
    m.mutable_log()->set_dropped_lines(m.log().dropped_lines() + dropped_log_lines_);
    bytes_ = bytes_ - std::min(bytes_, before) + m.ByteSizeLong();
    dropped_log_lines_ = 0;
    return;
  }
}

void ReportOutbox::PopFront() { Erase(messages_.begin(), /*dropped=*/false); }

size_t ReportOutbox::RetainJob(const std::string& job_id) {
  size_t removed = 0;
  for (auto it = messages_.begin(); it != messages_.end();) {
    const std::string* job = ReportedJob(*it);
    if (job_id.empty() || job == nullptr || *job != job_id) {
      bytes_ -= std::min(bytes_, it->ByteSizeLong());
      if (it->has_log()) log_lines_ -= std::min<size_t>(log_lines_, it->log().lines_size());
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

bool ReportOutbox::HasFailure(const std::string& job_id) const {
  return std::any_of(messages_.begin(), messages_.end(), [&](const zpipe::v1::WorkerMessage& m) {
    return m.has_failure() && m.failure().job_id() == job_id;
  });
}

uint64_t ReportOutbox::TakeDropped() { return std::exchange(dropped_, 0); }

void ReportOutbox::Erase(std::deque<zpipe::v1::WorkerMessage>::iterator it, bool dropped) {
  bytes_ -= std::min(bytes_, it->ByteSizeLong());
  if (it->has_log()) {
    log_lines_ -= std::min<size_t>(log_lines_, it->log().lines_size());
    if (dropped) {
      dropped_log_lines_ += it->log().dropped_lines() + it->log().lines_size();
    }
  }
  messages_.erase(it);
}

}  // namespace zpipe::worker
