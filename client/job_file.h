// Job files: a JobSpec written as YAML or JSON, with the field names of proto zpipe.v1.JobSpec
// (DESIGN.md "Job spec").
//
// The mapping is strict, because a typo in a training job should fail at submit time, not run
// with a default: an unknown field, a value of the wrong type (a string where a number belongs, a
// fraction for an integer, a map for a scalar) or two model kinds are errors that name the field
// path and the line. `schedule.memory_limit` takes a number or `auto` (= leave unset). Enum fields
// take the short lower-case name (`device: cuda`) or the full proto name. A null value (`key:` or
// `key: null`) leaves the field unset. Range checks are the coordinator's job (INVALID_ARGUMENT).
#ifndef ZPIPE_CLIENT_JOB_FILE_H_
#define ZPIPE_CLIENT_JOB_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe {

enum class JobFileFormat { kAuto, kYaml, kJson };

// Parses job file text. kAuto picks JSON when the first non-blank character is '{', else YAML.
// Errors are INVALID_ARGUMENT with a message "line N: what is wrong".
absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text, JobFileFormat format);

// Reads and parses the file at `path`: ".json" is JSON, ".yaml"/".yml" YAML, else as kAuto.
// Errors are prefixed with the path ("job.yaml: line 7: unknown field 'schedule.knd'"); a missing
// or unreadable file is NOT_FOUND naming the path. Relative input paths (model.torchscript.path,
// data.path, eval.path) are made absolute against the job file's directory, so a job file can name
// the model and data beside it; checkpoint.dir is left as written (the workers' working directory).
absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path);

}  // namespace zpipe

#endif  // ZPIPE_CLIENT_JOB_FILE_H_
