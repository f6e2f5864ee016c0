// Cost-balanced cut points for a model made of a sequence of blocks (a TorchScript nn.Sequential).
//
// The blocks are cut into S contiguous, non-empty stages. In steady state a pipeline runs at the
// pace of its most expensive stage, so BalancedCuts minimises that bottleneck exactly (cost of a
// stage = sum of f + b + w over its blocks). Many cuts usually share the optimal bottleneck
// (uniform blocks always do); among them it takes the most even one, the one with the smallest
// sum of squared stage costs, and among those the lexicographically smallest cuts. The result
// depends only on the costs, so every process that sees the same measurements cuts the same way.
//
// Costs come from measurements (worker/model/block_profile.h) in milliseconds, but any consistent
// unit works. Pure C++: no Torch, no proto.
#ifndef ZPIPE_CORE_PARTITION_H_
#define ZPIPE_CORE_PARTITION_H_

#include <vector>

#include "absl/status/statusor.h"

namespace zpipe::core {

// Measured cost of one block, or (StageCosts) of one stage, per microbatch.
struct BlockCost {
  double f_ms = 0;
  double b_ms = 0;
  double w_ms = 0;
  double activation_bytes = 0;  // the block's output for one microbatch
  double param_bytes = 0;

  double total_ms() const { return f_ms + b_ms + w_ms; }
};

// The S - 1 block indices where stages 1..S-1 begin (the form of the job spec's
// model.torchscript.cuts): stage s holds blocks [cuts[s-1], cuts[s]) with cuts[-1] = 0 and
// cuts[S-1] = blocks.size(). Minimises the largest stage cost, then the sum of squared stage
// costs, then the cuts lexicographically (see the file comment). InvalidArgument when
// num_stages < 1, blocks.size() < num_stages, or a cost is negative or not finite.
// Time O(S * n * log n) for the bottleneck plus O(S * sum over blocks of the number of blocks a
// stage ending there may start at) for the tie-break; memory O(S * n).
absl::StatusOr<std::vector<int>> BalancedCuts(const std::vector<BlockCost>& blocks, int num_stages);

// Cuts for stages that share ranks: stage s runs on rank rank_of_stage[s] (a V schedule puts
// stages r and 2p-1-r on rank r; interleaved ones s and s+p, ...), and a pipeline runs at the
// pace of its busiest rank, so this minimises the largest rank load (the sum of its stages'
// costs), then the largest stage cost, then the sum of squared stage costs. Starts from
// BalancedCuts and the even split and improves by moving one cut at a time while the objective
// falls (deterministic, a local optimum); with one stage per rank it returns BalancedCuts.
// InvalidArgument as BalancedCuts, or when rank_of_stage does not have num_stages entries.
absl::StatusOr<std::vector<int>> RankBalancedCuts(const std::vector<BlockCost>& blocks,
                                                  const std::vector<int>& rank_of_stage);

// Per-stage sums of f, b, w and param bytes for `cuts` (strictly increasing indices in
// (0, blocks.size()), as BalancedCuts returns); a stage's activation is its last block's output.
// Returns cuts.size() + 1 stages.
std::vector<BlockCost> StageCosts(const std::vector<BlockCost>& blocks,
                                  const std::vector<int>& cuts);

}  // namespace zpipe::core

#endif  // ZPIPE_CORE_PARTITION_H_
