// How `zpipe` prints documents: `-o json` through the one JSON vocabulary of api/json.h (shared
// with the coordinator's /api and the Python client; docs/json.md documents it field by field),
// `-o yaml` as the same keys and values in YAML. A job spec is printed as the coordinator returns
// it: with its defaults resolved (coordinator/spec_defaults.h), so what is printed is what runs;
// clients fill in nothing.
#ifndef ZPIPE_CLIENT_JSON_OUTPUT_H_
#define ZPIPE_CLIENT_JSON_OUTPUT_H_

#include <iosfwd>
#include <string>

#include "api/json.h"
#include "client/cli.h"

namespace zpipe::cli {

// The vocabulary's encoders (api/json.h), by their short names in the commands.
using api::EventJson;
using api::Json;
using api::JobJson;
using api::JobListJson;
using api::MessageJson;
using api::SpecJson;
using api::WorkerListJson;

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
