// Permanent errors: a rank's failure that a restart of the job cannot fix (the checkpoint disk is
// full, read-only or not a directory). The rank's RankFailure says so (`permanent`), and the
// coordinator fails the job at once instead of restarting it into the same error.
//
// Permanence is a mark on the absl::Status (util/status_marks.h), so it survives being returned
// through the layers unchanged; a status rebuilt from another's code and message loses it (mark it
// after, or reword it with util::Reworded).
#ifndef ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_
#define ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "util/status_marks.h"

namespace zpipe::worker {

inline constexpr absl::string_view kPermanentErrorPayload = "zeropipe.dev/permanent";

// `status` (not OK) marked permanent.
inline absl::Status MarkPermanent(absl::Status status) {
  return util::WithMark(std::move(status), kPermanentErrorPayload);
}
inline bool IsPermanent(const absl::Status& status) {
  return util::HasMark(status, kPermanentErrorPayload);
}

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_
