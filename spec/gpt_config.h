// The built-in GPT model's shape (`model.gpt` in a job spec) and how its layers are cut into
// pipeline stages: one type, one validator and one split rule for the coordinator (spec
// validation, cost model) and the worker (building the stages), so a spec the coordinator accepts
// is one every worker can build, and both sides agree on which layers each stage holds.
//
// Uneven splits are allowed: S = p * v stages take L / S layers each and the first L % S stages
// one more (StageLayers). The worker's stages match the unpartitioned model for any split, and the
// coordinator's cost model charges each stage its own layer count.
//
// std + abseil only: no protobuf, no Torch (spec/ sits beside core/, below coordinator/ and
// worker/).
#ifndef ZPIPE_SPEC_GPT_CONFIG_H_
#define ZPIPE_SPEC_GPT_CONFIG_H_

#include "absl/status/status.h"

namespace zpipe::spec {

// docs/design.md "Job spec", `model.gpt`; ranges in proto/zpipe/v1/job.proto GptModel.
struct GptConfig {
  int layers = 0;   // transformer blocks L, 1..4096
  int hidden = 0;   // width H, 1..65536, a multiple of heads
  int heads = 0;    // 1..1024
  int seq_len = 0;  // maximum tokens per sample (position embedding size), 1..2^20
  int vocab = 0;    // 2..10^7

  friend bool operator==(const GptConfig&, const GptConfig&) = default;
};

// OK when every field is in its range, hidden is a multiple of heads and the layers fill
// `num_stages` stages (1 <= num_stages <= layers). Otherwise InvalidArgument
// "spec.model.gpt.<field>: <reason>" for the first field at fault, or "stages: ..." for
// num_stages < 1 (a caller's bug, not the spec's).
absl::Status ValidateGptConfig(const GptConfig& config, int num_stages);

// Layers [begin, end) of one stage.
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

// The layers of stage `stage` of `num_stages` (1 <= num_stages <= layers, 0 <= stage <
// num_stages): layers / num_stages each, the first layers % num_stages stages one more, so stage
// sizes differ by at most one and every stage has at least one layer.
LayerRange StageLayers(int layers, int num_stages, int stage);

}  // namespace zpipe::spec

#endif  // ZPIPE_SPEC_GPT_CONFIG_H_
