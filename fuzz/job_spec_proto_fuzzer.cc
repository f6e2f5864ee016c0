// Fuzz target: SubmitJob's spec as the coordinator receives it: wire-format v1::JobSpec bytes,
// through the proto adapter (coordinator/job_proto.h SpecFromProto) and the spec validator
// (coordinator/spec_validator.h ValidateSpecFields). Both must answer every message with OK or
// INVALID_ARGUMENT, and a valid spec must survive the round trip to proto and back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "coordinator/job_proto.h"
#include "coordinator/spec_validator.h"
#include "zpipe/v1/job.pb.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "job spec proto: %s\n", what.c_str());
  std::abort();
}

void CheckCode(const absl::Status& status, const char* where) {
  if (status.ok() || status.code() == absl::StatusCode::kInvalidArgument) return;
  Fail(std::string(where) + " answered " + status.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zpipe::v1::JobSpec proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<zpipe::coordinator::JobSpec> spec = zpipe::coordinator::SpecFromProto(proto);
  CheckCode(spec.status(), "SpecFromProto");
  if (!spec.ok()) return 0;
  const absl::Status valid = zpipe::coordinator::ValidateSpecFields(*spec);
  CheckCode(valid, "ValidateSpecFields");
  if (!valid.ok()) return 0;
  absl::StatusOr<zpipe::coordinator::JobSpec> again =
      zpipe::coordinator::SpecFromProto(zpipe::coordinator::SpecToProto(*spec));
  if (!again.ok()) Fail("a valid spec does not convert back: " + again.status().ToString());
  CheckCode(zpipe::coordinator::ValidateSpecFields(*again), "ValidateSpecFields (round trip)");
  if (!zpipe::coordinator::ValidateSpecFields(*again).ok())
    Fail("a valid spec is not after a round trip");
  return 0;
}
