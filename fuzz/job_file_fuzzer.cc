// Fuzz target: job files (client/job_file.h), each input read as YAML and as JSON.
//
// Besides the sanitizers' checks, the reader's contract: every failure is INVALID_ARGUMENT with
// a message "line N: ..." (so the CLI exits 2 naming the line), and its work stays bounded (the
// job-file limits; libFuzzer's -rss_limit_mb and -timeout catch a limit that does not hold).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "client/job_file.h"

namespace {

void CheckContract(const absl::Status& status, const char* format) {
  if (status.ok()) return;
  const bool coded = status.code() == absl::StatusCode::kInvalidArgument;
  const bool lined =
      absl::StartsWith(status.message(), "line ") || status.message() == "the job file is empty";
  if (coded && lined) return;
  std::fprintf(stderr, "job file (%s): error breaks the contract: %s\n", format,
               status.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  CheckContract(zpipe::ParseJobSpec(text, zpipe::JobFileFormat::kYaml).status(), "yaml");
  CheckContract(zpipe::ParseJobSpec(text, zpipe::JobFileFormat::kJson).status(), "json");
  return 0;
}
