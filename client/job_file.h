// Job files: a JobSpec written as YAML or JSON, with the field names of proto zpipe.v1.JobSpec
// (docs/design.md "Job spec").
//
// The mapping is strict, because a typo in a training job should fail at submit time, not run
// with a default: an unknown field, a value of the wrong type (a string where a number belongs, a
// fraction for an integer, a map for a scalar) or two model kinds are errors that name the field
// path and the line. `schedule.memory_limit` takes a number or `auto` (= leave unset). Enum fields
// take the short lower-case name (`device: cuda`) or the full proto name. A null value (`key:` or
// `key: null`) leaves the field unset. Range checks are the coordinator's job (INVALID_ARGUMENT);
// LocateInJobFile points its answer at the file's line.
//
// A job file may come from anyone, so the reader bounds its own work (docs/design.md "Limits")
// with the limits below; each error names its limit and the line where it was crossed.
#ifndef ZPIPE_CLIENT_JOB_FILE_H_
#define ZPIPE_CLIENT_JOB_FILE_H_

#include <cstddef>
#include <iosfwd>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe {

// Job-file limits. A real job spec is a few KiB, a few hundred values and 4 levels deep; these
// leave room for long lists (cuts, betas) and bound the reader to about 150 MB and 2 s whatever
// the input (measured worst case: 1 MiB of nested YAML flow lists, which yaml-cpp's scanner
// buffers whole before its parser sees them).
//
// Size: text longer than this is refused before parsing ("the job-file size limit (1 MiB)").
inline constexpr size_t kMaxJobFileBytes = size_t{1} << 20;
// Nesting: maps and lists nested deeper than this (the top-level map is level 1) are refused
// ("the job-file depth limit"). It also keeps every recursion over the tree shallow: without
// it a 2 MB JSON file of '[' overflowed the stack.
inline constexpr int kMaxJobFileDepth = 64;
// Expansion: the number of values (scalars, maps and lists) after YAML aliases are expanded.
// Aliases make a DAG that a tree copy multiplies out: nine levels of nine aliases are 387
// million values from a 352-byte file ("billion laughs"). Refused past this many values ("the
// job-file expansion limit"), counted while parsing.
inline constexpr int kMaxJobFileValues = 100'000;
// Expansion, in text: the total length of all scalars and keys after aliases are expanded (one
// 1 MiB string aliased 100 times is 100 MiB). Also "the job-file expansion limit".
inline constexpr size_t kMaxJobFileExpandedBytes = size_t{16} << 20;

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

// Reads job file text from `in` (`zpipe submit -`: standard input; the Python client sends its
// dicts and text this way) and parses it as kAuto. Errors carry no path ("line 3: unknown field
// 'schedule.knd' ..."), and relative input paths are kept as written: there is no file for them
// to be relative to.
absl::StatusOr<v1::JobSpec> ReadJobSpec(std::istream& in);

// Restates an error about a field of the spec loaded from the job file at `path` with where that
// field is written. The coordinator's range checks (coordinator/spec_validator.h) name a field
// path but no line: "spec.batch.microbatches: must be in [1, 4096], got -3" becomes
// "job.yaml:12: batch.microbatches: must be in [1, 4096], got -3". The line is the field's value,
// or the nearest enclosing field the file writes when it leaves this one to its default. Any
// other status (no "spec." path, a file that no longer parses) comes back unchanged.
absl::Status LocateInJobFile(const absl::Status& status, const std::string& path);

}  // namespace zpipe

#endif  // ZPIPE_CLIENT_JOB_FILE_H_
