// The one JSON vocabulary of `zpipe ... -o json`, shared with the Python client's dicts
// (python/zeropipe/client.py to_dict); README "JSON output" documents it for users.
//
// A message becomes an object with its proto field names (the names the tables' columns come
// from), every field present:
//   - enums: the lower-case value name without the enum's prefix ("running", "idle", "cpu",
//     "fail"); null for an UNSPECIFIED value; the number for a value newer than this zpipe;
//   - 64-bit integers are JSON numbers (never strings); doubles are numbers (null for NaN);
//   - google.protobuf.Timestamp: an RFC 3339 string in UTC ("2026-05-01T12:00:00.250Z");
//   - a message or `optional` field that is not set: null; repeated fields: arrays;
//   - of a oneof only the member that is set, plus the oneof's name giving which one
//     ("kind": "snapshot"); a job spec's model shows only its member ({"synthetic": {...}});
//   - a job spec is printed as the coordinator returns it: with its defaults resolved
//     (coordinator/spec_defaults.h), so what is printed is what runs. Clients fill in nothing.
// The Python client applies the same rules; tests/python/client_e2e_test.py checks that the CLI
// and the Python client print the same objects for the same jobs.
#ifndef ZPIPE_CLIENT_JSON_OUTPUT_H_
#define ZPIPE_CLIENT_JSON_OUTPUT_H_

#include <iosfwd>
#include <nlohmann/json.hpp>

#include "client/cli.h"
#include "google/protobuf/message.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::cli {

// Objects keep the proto's field order.
using Json = nlohmann::ordered_json;

// `message` under the rules above.
Json MessageJson(const google::protobuf::Message& message);

// A job spec with the model's oneof name dropped (the job-file shape).
Json SpecJson(const v1::JobSpec& spec);
// A job record; its "spec" as SpecJson.
Json JobJson(const v1::Job& job);
// One event of a watch stream ("kind": "snapshot", "state_change", "iteration" or "progress");
// a snapshot as JobJson.
Json EventJson(const v1::JobEvent& event);

// Prints `value` and a newline: indented by 2, or on one line when !pretty (JSON lines).
void PrintJson(std::ostream& out, const Json& value, bool pretty = true);

// Prints `value` in the context's document format: JSON as PrintJson does (`stream`: one line, a
// JSON line of a stream of events or log lines), or YAML with the same keys and values (`stream`:
// one "---" document of a stream). Strings that YAML would read as another type ("123", "true",
// "null") are quoted.
void PrintDocument(CliContext& ctx, const Json& value, bool stream = false);
// `value` as a YAML block (no trailing newline).
std::string JsonToYaml(const Json& value);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_JSON_OUTPUT_H_
