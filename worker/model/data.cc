#include "worker/model/data.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t Combine(uint64_t h, uint64_t v) { return Mix(h ^ Mix(v)); }

// A splitmix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}
  uint64_t Next() { return Mix(state_++); }
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

}  // namespace

SyntheticTokenData::SyntheticTokenData(uint64_t seed, int vocab, int seq_len, int microbatch_size)
    : seed_(seed), vocab_(vocab), seq_len_(seq_len), microbatch_size_(microbatch_size) {
  Rng rng(Combine(Combine(seed, 0x7ab1e), vocab));
  successors_.resize(static_cast<size_t>(vocab) * kSuccessors);
  for (int64_t& s : successors_) s = rng.Below(vocab);
}

absl::StatusOr<SyntheticTokenData> SyntheticTokenData::Make(uint64_t seed, int vocab, int seq_len,
                                                            int microbatch_size) {
  if (vocab < 2) return absl::InvalidArgumentError(absl::StrCat("data: vocab ", vocab, " < 2"));
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data: seq_len ", seq_len, " < 1"));
  }
  if (microbatch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: microbatch_size ", microbatch_size, " < 1"));
  }
  return SyntheticTokenData(seed, vocab, seq_len, microbatch_size);
}

TokenBatch SyntheticTokenData::Microbatch(int64_t iteration, int dp_rank, int mb) const {
  const int64_t n = seq_len_ + 1;
  std::vector<int64_t> seq(static_cast<size_t>(microbatch_size_) * n);
  const uint64_t base = Combine(Combine(Combine(Combine(seed_, 0xda7a), iteration), dp_rank), mb);
  for (int j = 0; j < microbatch_size_; ++j) {
    Rng rng(Combine(base, j));
    int64_t* s = &seq[static_cast<size_t>(j) * n];
    s[0] = rng.Below(vocab_);
    if (n > 1) s[1] = rng.Below(vocab_);
    for (int64_t k = 2; k < n; ++k) {
      const uint64_t a = s[k - 2], b = s[k - 1];
      const uint64_t r = rng.Next();
      const int64_t which = (r & 3) != 0
                                ? static_cast<int64_t>(Mix(seed_ ^ (a * 131071 + b)) % kSuccessors)
                                : static_cast<int64_t>((r >> 2) % kSuccessors);
      s[k] = successors_[b * kSuccessors + which];
    }
  }
  torch::Tensor all = torch::from_blob(seq.data(), {microbatch_size_, n}, torch::kLong).clone();
  return TokenBatch{all.narrow(1, 0, seq_len_).contiguous(),
                    all.narrow(1, 1, seq_len_).contiguous()};
}

TokenBatch SyntheticTokenData::GlobalBatch(int64_t iteration, int dp_size, int m) const {
  std::vector<torch::Tensor> tokens, targets;
  for (int d = 0; d < dp_size; ++d) {
    for (int i = 0; i < m; ++i) {
      TokenBatch b = Microbatch(iteration, d, i);
      tokens.push_back(std::move(b.tokens));
      targets.push_back(std::move(b.targets));
    }
  }
  return TokenBatch{torch::cat(tokens), torch::cat(targets)};
}

}  // namespace zpipe::worker::model
