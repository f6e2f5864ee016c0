// Placement: which pipeline rank and which local chunk hold each model stage.
//
// A model is cut into S = p * v stages. The placement maps stage s to (rank, chunk):
//   linear       v = 1, s -> (s, 0)
//   interleaved  v >= 2, s -> (s mod p, s div p)
//   v-shape      v = 2, s < p -> (s, 0), s >= p -> (2p - 1 - s, 1)
#ifndef ZPIPE_CORE_PLACEMENT_H_
#define ZPIPE_CORE_PLACEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zpipe::core {

enum class PlacementKind { kLinear, kInterleaved, kVShape };

absl::string_view PlacementKindName(PlacementKind kind);
absl::StatusOr<PlacementKind> ParsePlacementKind(absl::string_view name);

class Placement {
 public:
  Placement() = default;
  // Requires p >= 1; v == 1 for linear, v >= 2 for interleaved, v == 2 for v-shape
  // (use Make() for checked construction from user input).
  Placement(PlacementKind kind, int pipeline, int chunks);

  static absl::StatusOr<Placement> Make(PlacementKind kind, int pipeline, int chunks);
  static Placement Linear(int p) { return Placement(PlacementKind::kLinear, p, 1); }
  static Placement Interleaved(int p, int v) {
    return Placement(PlacementKind::kInterleaved, p, v);
  }
  static Placement VShape(int p) { return Placement(PlacementKind::kVShape, p, 2); }

  PlacementKind kind() const { return kind_; }
  int num_ranks() const { return p_; }
  int chunks_per_rank() const { return v_; }
  int num_stages() const { return p_ * v_; }

  int RankOf(int stage) const;
  int ChunkOf(int stage) const;
  int StageOf(int rank, int chunk) const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ && a.p_ == b.p_ && a.v_ == b.v_;
  }

 private:
  PlacementKind kind_ = PlacementKind::kLinear;
  int p_ = 1;
  int v_ = 1;
};

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_PLACEMENT_H_
