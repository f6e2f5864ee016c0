// Measured per-block costs of a block model (TorchScript or Python), the input of cost-balanced
// cuts (core/partition.h: BalancedCuts, StageCosts).
//
// Each block is timed alone, the way a block stage runs it (block_model.h): F is the block's
// forward (for the last block with the cross-entropy loss over its logits), B is the input-gradient
// pass of SplitBackward including the graph walk (Make + RunInput), W the weight pass (RunWeight).
// A block whose graph cannot be split has its whole backward in B and W ~ 0, as it would in
// training. Block k > 0 takes the previous block's real output of the same microbatch, detached
// into a leaf that requires grad, so B computes the input gradient it would compute in a pipeline;
// its output gradient is seeded random (only its shape matters for the time). Token ids and
// targets are seeded random ids < V, identical on every call.
//
// Profiling leaves training as it was: every parameter keeps its .grad tensor (the same tensor
// object, values untouched, or undefined as before) and its requires_grad flag, buffers (running
// statistics a forward updates) get their values back, and the default CPU generator's state is
// restored (dropout draws nothing on training's behalf).
//
// Runs on the CPU, where the models are loaded, on the calling thread; it uses the
// model's blocks, so no stage of `model` may run concurrently. Takes about
// (warmup + reps) x one microbatch's F, B and W through the whole model.
#ifndef ZPIPE_WORKER_MODEL_BLOCK_PROFILE_H_
#define ZPIPE_WORKER_MODEL_BLOCK_PROFILE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/partition.h"
#include "worker/model/block_model.h"

namespace zpipe::worker::model {

// Times F, B and W of every block of `model` on microbatches of [microbatch_size, seq_len] token
// ids: `warmup` untimed microbatches, then `reps` timed ones; each time is the median over the
// timed ones, in milliseconds. activation_bytes: the block's output for one microbatch (the last
// block's: its logits); param_bytes: its parameters. `model` must have been loaded with a probe
// (seq_len > 0) so that V is known: FailedPrecondition otherwise. InvalidArgument for
// microbatch_size, seq_len or reps < 1 or warmup < 0, and for a block that breaks the contract on
// this input; Internal for other LibTorch errors. Errors name the block and the pass.
absl::StatusOr<std::vector<core::BlockCost>> ProfileBlocks(BlockModel& model,
                                                           int microbatch_size, int seq_len,
                                                           int warmup = 1, int reps = 3);

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_BLOCK_PROFILE_H_
