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
//   - a job spec's "0 / empty = default" fields hold the default they resolve to
//     (ResolveSpecDefaults), so what is printed is what runs.
// The Python client applies the same rules; tests/python/client_e2e_test.py checks that the CLI
// and the Python client print the same objects for the same jobs.
#ifndef ZPIPE_CLIENT_JSON_OUTPUT_H_
#define ZPIPE_CLIENT_JSON_OUTPUT_H_

#include <iosfwd>
#include <nlohmann/json.hpp>

#include "google/protobuf/message.h"
#include "zpipe/v1/coordinator.pb.h"

namespace zpipe::cli {

// Objects keep the proto's field order.
using Json = nlohmann::ordered_json;

// `message` under the rules above (spec defaults are resolved only by the typed functions below).
Json MessageJson(const google::protobuf::Message& message);

// A job spec with its defaults resolved and the model's oneof name dropped (the job-file shape).
Json SpecJson(const v1::JobSpec& spec);
// A job record; its "spec" as SpecJson.
Json JobJson(const v1::Job& job);
// One event of a watch stream ("kind": "snapshot", "state_change", "iteration" or "progress");
// a snapshot as JobJson.
Json EventJson(const v1::JobEvent& event);

// `spec` with every field job.proto documents as "0 / empty / unset = X" set to X: parallel.data
// 1, schedule.chunks 2 for interleaved, train.optimizer "adamw", train.weight_decay (0.01 for
// adamw, else 0), train.betas [0.9, 0.999] and train.eps 1e-8 (adam, adamw), train.clip_grad_norm
// 1, train.lr_schedule {warmup 0, decay "constant", min_lr 0}, train.precision "fp32",
// grad_sync {bucket_mb 25, overlap true}, data.dtype "uint16" and data.seq_len (the GPT model's)
// when there is a data section, eval.batches 4 when there is an eval section,
// checkpoint.on_error fail, device cpu, restart {max_restarts 0, backoff "2s"}.
// schedule.memory_limit stays unset ("auto"): the limit it resolves to depends on the plan and is
// the job's predicted.memory_limit. Submitting the result runs the same job.
v1::JobSpec ResolveSpecDefaults(v1::JobSpec spec);

// Prints `value` and a newline: indented by 2, or on one line when !pretty (JSON lines).
void PrintJson(std::ostream& out, const Json& value, bool pretty = true);

}  // namespace zpipe::cli

#endif  // ZPIPE_CLIENT_JSON_OUTPUT_H_
