#include "core/placement.h"

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::core {

absl::string_view PlacementKindName(PlacementKind kind) {
  switch (kind) {
    case PlacementKind::kLinear:
      return "linear";
    case PlacementKind::kInterleaved:
      return "interleaved";
    case PlacementKind::kVShape:
      return "v";
  }
  return "unknown";
}

absl::StatusOr<PlacementKind> ParsePlacementKind(absl::string_view name) {
  if (name == "linear") return PlacementKind::kLinear;
  if (name == "interleaved") return PlacementKind::kInterleaved;
  if (name == "v" || name == "v-shape") return PlacementKind::kVShape;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement '", name, "' (expected linear, interleaved or v)"));
}

Placement::Placement(PlacementKind kind, int pipeline, int chunks)
    : kind_(kind), p_(pipeline), v_(chunks) {
  if (absl::Status s = Make(kind, pipeline, chunks).status(); !s.ok()) {
    std::fprintf(stderr, "zpipe: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
}

absl::StatusOr<Placement> Placement::Make(PlacementKind kind, int pipeline, int chunks) {
  if (pipeline < 1) return absl::InvalidArgumentError("placement: pipeline must be >= 1");
  switch (kind) {
    case PlacementKind::kLinear:
      if (chunks != 1)
        return absl::InvalidArgumentError("placement: linear needs 1 chunk per rank");
      break;
    case PlacementKind::kInterleaved:
      if (chunks < 2) {
        return absl::InvalidArgumentError("placement: interleaved needs >= 2 chunks per rank");
      }
      break;
    case PlacementKind::kVShape:
      if (chunks != 2)
        return absl::InvalidArgumentError("placement: v-shape needs 2 chunks per rank");
      break;
  }
  Placement p;
  p.kind_ = kind;
  p.p_ = pipeline;
  p.v_ = chunks;
  return p;
}

int Placement::RankOf(int stage) const {
  switch (kind_) {
    case PlacementKind::kLinear:
      return stage;
    case PlacementKind::kInterleaved:
      return stage % p_;
    case PlacementKind::kVShape:
      return stage < p_ ? stage : 2 * p_ - 1 - stage;
  }
  return 0;
}

int Placement::ChunkOf(int stage) const {
  switch (kind_) {
    case PlacementKind::kLinear:
      return 0;
    case PlacementKind::kInterleaved:
      return stage / p_;
    case PlacementKind::kVShape:
      return stage < p_ ? 0 : 1;
  }
  return 0;
}

int Placement::StageOf(int rank, int chunk) const {
  switch (kind_) {
    case PlacementKind::kLinear:
      return rank;
    case PlacementKind::kInterleaved:
      return chunk * p_ + rank;
    case PlacementKind::kVShape:
      return chunk == 0 ? rank : 2 * p_ - 1 - rank;
  }
  return 0;
}

}  // namespace zpipe::core
