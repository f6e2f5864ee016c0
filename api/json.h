// The one JSON vocabulary of ZeroPipe: what `zpipe ... -o json` prints and what the coordinator's
// HTTP `/api` serves, one encoder per object type, shared by both (docs/json.md documents every
// field; python/zeropipe/vocabulary.py is the Python client's side of the same rules).
//
// A message becomes an object with its proto field names, every field present:
//   - enums: the lower-case value name without the enum's prefix ("running", "idle", "cpu",
//     "fail"); null for an UNSPECIFIED value; the number for a value newer than this build;
//   - 64-bit integers are JSON numbers (never strings); doubles are numbers, null for NaN and
//     infinities (JSON has neither);
//   - google.protobuf.Timestamp: an RFC 3339 string in UTC ("2026-05-01T12:00:00.250Z");
//     google.protobuf.Duration: seconds as a number;
//   - bytes: base64;
//   - a message or `optional` field that is not set: null, never left out; repeated fields:
//     arrays (empty, never null); map fields (labels): objects, in key order (empty, never null);
//   - of a oneof only the member that is set, plus the oneof's name giving which one
//     ("kind": "snapshot"); a job spec's model shows only its member ({"synthetic": {...}}), so
//     a printed spec is a job file again.
// Errors are {"code": "NOT_FOUND", "message": "..."} with the canonical status code's name.
//
// The encoders are pure functions of their message; thread-safe.
#ifndef ZPIPE_API_JSON_H_
#define ZPIPE_API_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::api {

// Objects keep the proto's field order.
using Json = nlohmann::ordered_json;

// `message` under the rules above.
Json MessageJson(const google::protobuf::Message& message);

// A job spec with the model's oneof name dropped (the job-file shape).
Json SpecJson(const v1::JobSpec& spec);
// A job record; its "spec" as SpecJson.
Json JobJson(const v1::Job& job);
// {"jobs": [job, ...]}: `zpipe list` and /api/jobs.
Json JobListJson(const std::vector<v1::Job>& jobs);
// One event of a watch stream ("kind": "snapshot", "state_change", "iteration", "progress" or
// "plan_switch"); a snapshot as JobJson.
Json EventJson(const v1::JobEvent& event);
// {"workers": [worker, ...]}: `zpipe workers`.
Json WorkerListJson(const std::vector<v1::Worker>& workers);
// An executed timeline beside the predicted one: /api/jobs/ID/trace.
Json TraceJson(const v1::GetTraceResponse& trace);
// {"code": "INVALID_ARGUMENT", "message": "..."} for a status that is not OK.
Json ErrorJson(const absl::Status& status);

// `value` as text: indented by 2 when `pretty`, else on one line; no trailing newline. Strings
// that are not UTF-8 have their bad bytes replaced (U+FFFD) rather than failing.
std::string Dump(const Json& value, bool pretty);

}  // namespace zpipe::api

#endif  // ZPIPE_API_JSON_H_
