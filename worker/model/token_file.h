// Token files as training data: a flat array of little-endian token ids (nanoGPT's train.bin
// layout, dtype uint16 or uint32), memory-mapped read-only and dealt out to (iteration, rank,
// microbatch, row) by a fixed contract, so that a plain PyTorch loop (python/zeropipe, the
// functions window_index, batch and eval_batch) reads exactly the tokens a ZeroPipe run read.
//
// Windows. L = seq_len. Window k is tokens [k·L, k·L + L + 1): the inputs are its first L tokens,
// the targets its last L. A file of n tokens has N = floor((n − 1) / L) windows; N == 0 is an
// error. Consecutive windows share one token (the last target of k is the first input of k + 1).
//
// Training order. Iteration t (0-based), data-parallel rank r of d, microbatch i of m, row j of
// b = microbatch_size reads global sample g = (((t·d + r)·m + i)·b + j):
//   - without a shuffle seed: window g mod N;
//   - with shuffle seed s: pass = g / N, pos = g mod N, window ShufflePermutation(s, pass, N)[pos];
//     every pass over the data is a fresh permutation, so every window is read once per pass.
//
// ShufflePermutation(s, p, N), all arithmetic on unsigned 64-bit integers modulo 2^64:
//   mix(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//            return z ^ (z >> 31)
//   next():  state = state + 0x9E3779B97F4A7C15; return mix(state)          (splitmix64)
//   state = mix(mix(s) + p)
//   perm = [0, 1, ..., N − 1]
//   for k = N − 1 down to 1: j = next() mod (k + 1); swap perm[k] and perm[j]   (Fisher–Yates)
// For example ShufflePermutation(42, 0, 10) = [2, 8, 9, 7, 1, 4, 6, 0, 5, 3] and
// ShufflePermutation(42, 1, 10) = [3, 1, 6, 8, 4, 5, 9, 7, 2, 0].
//
// Eval. Eval batch k (0 ≤ k < K), row j reads window (k·b + j) mod N_eval of the eval file: fixed
// batches, never shuffled, the same at every evaluation.
//
// The file must not change while it is mapped (a truncated mapping faults on read).
#ifndef ZPIPE_WORKER_MODEL_TOKEN_FILE_H_
#define ZPIPE_WORKER_MODEL_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "worker/model/data.h"

namespace zpipe::worker::model {

// The permutation of pass `pass` over `n` windows for `seed`, by the algorithm above.
std::vector<int64_t> ShufflePermutation(uint64_t seed, uint64_t pass, int64_t n);

// One token file, mapped read-only. Movable, not copyable; unmaps when destroyed. Const methods
// are safe to call from several threads.
class TokenFile {
 public:
  // Maps `path`; `dtype` is "uint16" or "uint32". NotFound if the file does not exist;
  // InvalidArgument for an unknown dtype, a file that cannot be opened or mapped (or is not a
  // regular file), or a size that is not a multiple of the dtype's size. Messages name the file.
  static absl::StatusOr<TokenFile> Open(std::string path, absl::string_view dtype);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // tokens
  int bytes_per_token() const { return width_; }

  // Number of windows of seq_len >= 1 tokens: floor((size() − 1) / seq_len), 0 for an empty file.
  int64_t Windows(int seq_len) const;

  // Copies tokens [begin, begin + count) to `out`. Precondition: 0 <= begin, begin + count <=
  // size().
  void Read(int64_t begin, int64_t count, int64_t* out) const;

  // OK when every token id is < vocab. Otherwise InvalidArgument naming the file, the first
  // offending token's index and byte offset, and its value. Streams over the whole file once.
  absl::Status ValidateVocab(int64_t vocab) const;

 private:
  TokenFile(std::string path, const unsigned char* data, size_t bytes, int width);

  std::string path_;
  const unsigned char* data_ = nullptr;  // mapping of bytes_ bytes; null for an empty file
  size_t bytes_ = 0;
  int width_ = 2;
  int64_t size_ = 0;
};

// Training microbatches from a token file, in the order stated at the top of this file.
// Thread-safe; holds the permutations of the two most recently used passes.
class TokenFileData : public TokenData {
 public:
  struct Options {
    std::string path;
    std::string dtype;  // "uint16" or "uint32"
    int seq_len = 0;
    int data_size = 1;                                    // d: data-parallel ranks
    int microbatches = 1;                                 // m: microbatches per iteration and rank
    int microbatch_size = 1;                              // b: rows per microbatch
    std::optional<uint64_t> shuffle_seed = std::nullopt;  // none: read windows in order
  };

  // Errors of TokenFile::Open; InvalidArgument if a size in `options` is < 1 or the file holds
  // fewer than seq_len + 1 tokens (no window), naming the file.
  static absl::StatusOr<std::unique_ptr<TokenFileData>> Make(const Options& options);

  // Preconditions: iteration >= 0, 0 <= dp_rank < data_size, 0 <= mb < microbatches (checked;
  // a violation throws c10::Error).
  TokenBatch Microbatch(int64_t iteration, int dp_rank, int mb) const override;

  // The window that row `row` of Microbatch(iteration, dp_rank, mb) reads.
  int64_t Window(int64_t iteration, int dp_rank, int mb, int row) const;

  int seq_len() const override { return options_.seq_len; }
  int microbatch_size() const override { return options_.microbatch_size; }
  int64_t windows() const { return windows_; }  // N
  const TokenFile& file() const { return file_; }

 private:
  TokenFileData(Options options, TokenFile file);

  // The permutation of `pass`, from the cache or computed (and cached) under mu_.
  std::shared_ptr<const std::vector<int64_t>> Permutation(uint64_t pass) const;

  Options options_;
  TokenFile file_;
  int64_t windows_;

  mutable absl::Mutex mu_;
  struct CachedPass {
    uint64_t pass;
    std::shared_ptr<const std::vector<int64_t>> perm;
  };
  // At most 2, most recently used last.
  mutable std::vector<CachedPass> cache_ ABSL_GUARDED_BY(mu_);
};

// Fixed evaluation batches from a token file: Batch(k) row j is window (k·b + j) mod N.
// Movable; const methods are thread-safe.
class TokenFileEval {
 public:
  // Errors of TokenFile::Open; InvalidArgument if seq_len, microbatch_size or batches is < 1 or
  // the file holds no window, naming the file.
  static absl::StatusOr<TokenFileEval> Make(std::string path, absl::string_view dtype, int seq_len,
                                            int microbatch_size, int batches);

  // Eval batch k, tensors [microbatch_size, seq_len]. Precondition: 0 <= k < batches() (checked).
  TokenBatch Batch(int k) const;

  int batches() const { return batches_; }  // K
  int seq_len() const { return seq_len_; }
  int microbatch_size() const { return microbatch_size_; }
  int64_t windows() const { return windows_; }  // N_eval
  const TokenFile& file() const { return file_; }

 private:
  TokenFileEval(TokenFile file, int seq_len, int microbatch_size, int batches);

  TokenFile file_;
  int seq_len_;
  int microbatch_size_;
  int batches_;
  int64_t windows_;
};

}  // namespace zpipe::worker::model

#endif  // ZPIPE_WORKER_MODEL_TOKEN_FILE_H_
