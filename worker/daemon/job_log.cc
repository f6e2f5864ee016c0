#include "worker/daemon/job_log.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_split.h"

namespace zpipe::worker {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  const auto c1 = static_cast<unsigned char>(s[i + 1]);
  if (c == 0xE0 && c1 < 0xA0) return 0;  // overlong
  if (c == 0xED && c1 > 0x9F) return 0;  // surrogate
  if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
  if (c == 0xF4 && c1 > 0x8F) return 0;  // beyond U+10FFFF
  return n;
}

}  // namespace

std::string CleanLogLine(std::string_view text) {
  constexpr std::string_view kCut = "...";
  const bool cut = text.size() > kMaxLogLineBytes;
  const size_t limit = cut ? kMaxLogLineBytes - kCut.size() : text.size();
  std::string out;
  out.reserve(limit + kCut.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (out.size() + std::max<size_t>(n, 1) > limit) break;
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (cut) out += kCut;
  return out;
}

void JobLog::Begin(const std::string& job_id, int pipeline_rank, int data_rank) {
  absl::MutexLock lock(&mu_);
  active_ = true;
  job_id_ = job_id;
  pipeline_rank_ = pipeline_rank;
  data_rank_ = data_rank;
  lines_.clear();
  dropped_ = 0;
}

void JobLog::End() {
  absl::MutexLock lock(&mu_);
  active_ = false;
}

void JobLog::Write(absl::Time time, std::string_view line) {
  absl::MutexLock lock(&mu_);
  if (!active_) return;
  for (absl::string_view part : absl::StrSplit(absl::string_view(line.data(), line.size()), '\n')) {
    if (!part.empty() && part.back() == '\r') part.remove_suffix(1);
    lines_.push_back({time, CleanLogLine(std::string_view(part.data(), part.size()))});
    if (lines_.size() > max_lines_) {
      lines_.pop_front();
      ++dropped_;
    }
  }
}

std::optional<JobLogBatch> JobLog::Take() {
  absl::MutexLock lock(&mu_);
  if (lines_.empty() && dropped_ == 0) return std::nullopt;
  if (job_id_.empty()) return std::nullopt;
  JobLogBatch batch;
  batch.job_id = job_id_;
  batch.pipeline_rank = pipeline_rank_;
  batch.data_rank = data_rank_;
  batch.dropped_lines = std::exchange(dropped_, 0);
  batch.lines.assign(std::make_move_iterator(lines_.begin()),
                     std::make_move_iterator(lines_.end()));
  lines_.clear();
  return batch;
}

}  // namespace zpipe::worker
