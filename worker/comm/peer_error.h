// Peer-lost errors: a rank's communication failed because a peer's connection broke or went
// silent (the peer's process died, or is stuck). Such a failure is an effect: the cause is the
// peer's own, so the rank's RankFailure says so (`peer_lost`) and the coordinator blames another
// rank's failure over it when both are reported.
//
// Like permanence (worker/daemon/permanent_error.h), it rides on the absl::Status as a payload;
// whoever rewords such a status keeps its payloads (Reworded).
#ifndef ZPIPE_WORKER_COMM_PEER_ERROR_H_
#define ZPIPE_WORKER_COMM_PEER_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace zpipe::worker {

inline constexpr absl::string_view kPeerLostPayload = "zeropipe.dev/peer-lost";

// `status` (not OK) marked as a peer's loss.
inline absl::Status MarkPeerLost(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPeerLostPayload, absl::Cord("1"));
  return status;
}

inline bool IsPeerLost(const absl::Status& status) {
  return status.GetPayload(kPeerLostPayload).has_value();
}

// `status` with `message` instead of its own, keeping its code and payloads.
inline absl::Status Reworded(const absl::Status& status, absl::string_view message) {
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_PEER_ERROR_H_
