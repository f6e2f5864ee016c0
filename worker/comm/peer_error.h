// Peer-lost errors: a rank's communication failed because a peer's connection broke or went
// silent (the peer's process died, or is stuck). Such a failure is an effect: the cause is the
// peer's own, so the rank's RankFailure says so (`peer_lost`) and the coordinator blames another
// rank's failure over it when both are reported. A mark on the status (util/status_marks.h);
// whoever rewords such a status keeps it with util::Reworded.
#ifndef ZPIPE_WORKER_COMM_PEER_ERROR_H_
#define ZPIPE_WORKER_COMM_PEER_ERROR_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "util/status_marks.h"

namespace zpipe::worker {

inline constexpr absl::string_view kPeerLostPayload = "zeropipe.dev/peer-lost";

inline absl::Status MarkPeerLost(absl::Status status) {
  return util::WithMark(std::move(status), kPeerLostPayload);
}
inline bool IsPeerLost(const absl::Status& status) {
  return util::HasMark(status, kPeerLostPayload);
}
using util::Reworded;

}  // namespace zpipe::worker

#endif  // ZPIPE_WORKER_COMM_PEER_ERROR_H_
