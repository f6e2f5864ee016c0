#include "spec/gpt_config.h"

#include <algorithm>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zpipe::spec {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("spec.model.gpt.", field, ": ", reason));
}

absl::Status IntIn(absl::string_view field, int value, int lo, int hi) {
  if (value < lo || value > hi) {
    return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// The ranges of job.proto's GptModel, in field order.
absl::Status FieldRanges(const GptConfig& c) {
  struct Range {
    absl::string_view field;
    int value, lo, hi;
  };
  for (const Range& r : {Range{"layers", c.layers, 1, 4096}, Range{"hidden", c.hidden, 1, 65536},
                         Range{"heads", c.heads, 1, 1024}, Range{"seq_len", c.seq_len, 1, 1 << 20},
                         Range{"vocab", c.vocab, 2, 10'000'000}}) {
    if (absl::Status s = IntIn(r.field, r.value, r.lo, r.hi); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGptConfig(const GptConfig& c, int num_stages) {
  if (absl::Status s = FieldRanges(c); !s.ok()) return s;
  if (c.hidden % c.heads != 0) {
    return Bad("hidden",
               absl::StrCat("must be a multiple of heads (", c.heads, "), got ", c.hidden));
  }
  if (num_stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("stages: ", num_stages, " must be >= 1"));
  }
  // Every stage needs a layer; beyond that any split works (StageLayers).
  if (num_stages > c.layers) {
    return Bad("layers", absl::StrCat(c.layers, " layers cannot fill ", num_stages,
                                      " pipeline stages (pipeline x chunks); use at least ",
                                      num_stages, " layers or fewer stages"));
  }
  return absl::OkStatus();
}

LayerRange StageLayers(int layers, int num_stages, int stage) {
  const int base = layers / num_stages, extra = layers % num_stages;
  const int begin = stage * base + std::min(stage, extra);
  return LayerRange{begin, begin + base + (stage < extra ? 1 : 0)};
}

}  // namespace zpipe::spec
