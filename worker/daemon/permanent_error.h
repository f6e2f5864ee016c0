// Permanent errors: a rank's failure that a restart of the job cannot fix (the checkpoint disk is
// full, read-only or not a directory). The rank's RankFailure says so (`permanent`), and the
// coordinator fails the job at once instead of restarting it into the same error.
//
// Permanence rides on the absl::Status as a payload, so it survives being returned through the
// layers unchanged; a status rebuilt from another's code and message loses it (mark it after).
#ifndef ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_
#define ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker {

inline constexpr absl::string_view kPermanentErrorPayload = "zeropipe.dev/permanent";

// `status` (not OK) marked permanent.
inline absl::Status MarkPermanent(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPermanentErrorPayload, absl::Cord("1"));
  return status;
}

inline bool IsPermanent(const absl::Status& status) {
  return status.GetPayload(kPermanentErrorPayload).has_value();
}

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_DAEMON_PERMANENT_ERROR_H_
