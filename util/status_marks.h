// Marks that ride on an absl::Status through the layers that return it: a payload under a URL of
// ours, whose presence is the mark (its value is unused). worker/daemon/permanent_error.h (a
// failure a restart cannot fix) and worker/comm/peer_error.h (a peer's loss) are two of them.
// A status rebuilt from another's code and message loses its payloads: reword it with Reworded.
#ifndef ZPIPE_UTIL_STATUS_MARKS_H_
#define ZPIPE_UTIL_STATUS_MARKS_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace zpipe::util {

// `status` (not OK) carrying the mark `url`; an OK status stays as it is.
inline absl::Status WithMark(absl::Status status, absl::string_view url) {
  if (!status.ok()) status.SetPayload(url, absl::Cord("1"));
  return status;
}

inline bool HasMark(const absl::Status& status, absl::string_view url) {
  return status.GetPayload(url).has_value();
}

// `status` with `message` instead of its own, keeping its code and every payload (marks).
inline absl::Status Reworded(const absl::Status& status, absl::string_view message) {
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace zpipe::util

#endif  // ZPIPE_UTIL_STATUS_MARKS_H_
