// Training data for one job: the TokenData interface the executor draws microbatches from, and
// SyntheticTokenData, deterministic synthetic data with learnable structure sharded by
// data-parallel rank. Token files (nanoGPT's train.bin) are TokenFileData in token_file.h.
//
// A synthetic sample is a walk of an order-2 Markov chain fixed by the seed: token b is followed
// by one of kSuccessors successors succ[b][k] (a table drawn from the seed); which one is chosen
// by the previous pair (a, b) with probability 3/4, uniformly otherwise. A model that learns
// bigrams gets from ln(vocab) to about ln(kSuccessors); one that also uses the token before gets
// lower.
//
// Microbatch(t, d, i) is a pure function of (seed, t, d, i): the same tokens in every run, on
// every process, whatever order microbatches are requested in; distinct data-parallel ranks d
// get distinct samples.
#ifndef ZPIPE_WORKER_MODEL_DATA_H_
#define ZPIPE_WORKER_MODEL_DATA_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace zpipe::worker::model {

struct TokenBatch {
  torch::Tensor tokens;   // [microbatch_size, seq_len] int64, CPU
  torch::Tensor targets;  // [microbatch_size, seq_len] int64, CPU: tokens shifted left by one
};

// Microbatches of token ids for one job. Microbatch(t, r, i) is a pure function of its arguments
// (and the data's construction): any process asking for the same coordinates gets the same
// tokens, in whatever order it asks. Implementations are safe to call from several threads.
class TokenData {
 public:
  virtual ~TokenData() = default;

  // Microbatch `mb` of iteration `iteration` (0-based) for data-parallel rank `dp_rank`:
  // tensors [microbatch_size(), seq_len()].
  virtual TokenBatch Microbatch(int64_t iteration, int dp_rank, int mb) const = 0;

  virtual int seq_len() const = 0;
  virtual int microbatch_size() const = 0;

 protected:
  TokenData() = default;
  // Copying belongs to concrete types only (no slicing through the interface).
  TokenData(const TokenData&) = default;
  TokenData& operator=(const TokenData&) = default;
};

class SyntheticTokenData : public TokenData {
 public:
  static constexpr int kSuccessors = 4;

  // InvalidArgument unless vocab >= 2, seq_len >= 1, microbatch_size >= 1.
  static absl::StatusOr<SyntheticTokenData> Make(uint64_t seed, int vocab, int seq_len,
                                                 int microbatch_size);

  // Microbatch `mb` of iteration `iteration` for data-parallel rank `dp_rank`.
  TokenBatch Microbatch(int64_t iteration, int dp_rank, int mb) const override;

  // The global batch of one iteration: microbatches (d, i) for d < dp_size, i < m, concatenated
  // along the batch dimension in that order (what a single-process reference trains on).
  TokenBatch GlobalBatch(int64_t iteration, int dp_size, int m) const;

  int vocab() const { return vocab_; }
  int seq_len() const override { return seq_len_; }
  int microbatch_size() const override { return microbatch_size_; }

 private:
  SyntheticTokenData(uint64_t seed, int vocab, int seq_len, int microbatch_size);

  uint64_t seed_;
  int vocab_;
  int seq_len_;
  int microbatch_size_;
  std::vector<int64_t> successors_;  // [vocab * kSuccessors]
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_DATA_H_
