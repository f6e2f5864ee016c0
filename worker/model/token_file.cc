#include "worker/model/token_file.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string Where(const std::string& path) { return absl::StrCat("token file '", path, "'"); }

// Little-endian token `k` of a mapping of `width`-byte tokens, whatever the host's byte order.
int64_t TokenAt(const unsigned char* data, int width, int64_t k) {
  const unsigned char* p = data + k * width;
  uint32_t v = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
  if (width == 4) v |= static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  return v;
}

// Windows `windows[j]` of `file` as rows j of a batch.
TokenBatch Gather(const TokenFile& file, int seq_len, const std::vector<int64_t>& windows) {
  const int64_t rows = static_cast<int64_t>(windows.size()), n = seq_len + 1;
  torch::Tensor all = torch::empty({rows, n}, torch::kLong);
  int64_t* out = all.data_ptr<int64_t>();
  for (int64_t j = 0; j < rows; ++j) file.Read(windows[j] * seq_len, n, out + j * n);
  return TokenBatch{all.narrow(1, 0, seq_len).contiguous(), all.narrow(1, 1, seq_len).contiguous()};
}

absl::Status NoWindow(const TokenFile& file, int seq_len) {
  return absl::InvalidArgumentError(absl::StrCat(
      Where(file.path()), " holds ", file.size(), " tokens: fewer than seq_len + 1 = ", seq_len + 1,
      " needed for one window; use a longer file or a shorter seq_len"));
}

}  // namespace

std::vector<int64_t> ShufflePermutation(uint64_t seed, uint64_t pass, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  uint64_t state = Mix(Mix(seed) + pass);
  for (int64_t k = n - 1; k >= 1; --k) {
    state += kGamma;
    const uint64_t j = Mix(state) % static_cast<uint64_t>(k + 1);
    std::swap(perm[k], perm[j]);
  }
  return perm;
}

// --- TokenFile ---

absl::StatusOr<TokenFile> TokenFile::Open(std::string path, absl::string_view dtype) {
  int width;
  if (dtype == "uint16") {
    width = 2;
  } else if (dtype == "uint32") {
    width = 4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path), ": unknown dtype '", dtype, "'; use uint16 or uint32"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = absl::StrCat(Where(path), ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(Where(path), ": not a regular file"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes % width != 0) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(Where(path), ": size ", bytes, " bytes is not a multiple of ", width,
                     " (dtype ", dtype, "); is the dtype right, or the file truncated?"));
  }
  const unsigned char* data = nullptr;
  if (bytes > 0) {
    void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path), ": cannot map: ", std::strerror(err)));
    }
    data = static_cast<const unsigned char*>(m);
  }
  ::close(fd);  // the mapping stays valid
  return TokenFile(std::move(path), data, bytes, width);
}

TokenFile::TokenFile(std::string path, const unsigned char* data, size_t bytes, int width)
    : path_(std::move(path)),
      data_(data),
      bytes_(bytes),
      width_(width),
      size_(static_cast<int64_t>(bytes / width)) {}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      width_(other.width_),
      size_(std::exchange(other.size_, 0)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    width_ = other.width_;
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
}

int64_t TokenFile::Windows(int seq_len) const { return size_ < 1 ? 0 : (size_ - 1) / seq_len; }

void TokenFile::Read(int64_t begin, int64_t count, int64_t* out) const {
  for (int64_t k = 0; k < count; ++k) out[k] = TokenAt(data_, width_, begin + k);
}

absl::Status TokenFile::ValidateVocab(int64_t vocab) const {
  for (int64_t k = 0; k < size_; ++k) {
    const int64_t id = TokenAt(data_, width_, k);
    if (id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(path_), ": token ", k, " (byte offset ", k * width_, ") is ", id,
                       ", not below the model's vocab ", vocab,
                       "; was the file tokenized for another vocabulary?"));
    }
  }
  return absl::OkStatus();
}

// --- TokenFileData ---

absl::StatusOr<std::unique_ptr<TokenFileData>> TokenFileData::Make(const Options& options) {
  for (const auto& [name, value] : {std::pair<const char*, int>{"seq_len", options.seq_len},
                                    {"data_size", options.data_size},
                                    {"microbatches", options.microbatches},
                                    {"microbatch_size", options.microbatch_size}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(options.path), ": ", name, " ", value, " < 1"));
    }
  }
  absl::StatusOr<TokenFile> file = TokenFile::Open(options.path, options.dtype);
  if (!file.ok()) return file.status();
  if (file->Windows(options.seq_len) == 0) return NoWindow(*file, options.seq_len);
  return std::unique_ptr<TokenFileData>(new TokenFileData(options, *std::move(file)));
}

TokenFileData::TokenFileData(Options options, TokenFile file)
    : options_(std::move(options)),
      file_(std::move(file)),
      windows_(file_.Windows(options_.seq_len)) {}

int64_t TokenFileData::Window(int64_t iteration, int dp_rank, int mb, int row) const {
  TORCH_CHECK(iteration >= 0 && dp_rank >= 0 && dp_rank < options_.data_size && mb >= 0 &&
                  mb < options_.microbatches && row >= 0 && row < options_.microbatch_size,
              "TokenFileData: (iteration ", iteration, ", dp_rank ", dp_rank, ", mb ", mb, ", row ",
              row, ") out of range");
  const int64_t g = ((iteration * options_.data_size + dp_rank) * options_.microbatches + mb) *
                        options_.microbatch_size +
                    row;
  if (!options_.shuffle_seed.has_value()) return g % windows_;
  return (*Permutation(static_cast<uint64_t>(g / windows_)))[g % windows_];
}

TokenBatch TokenFileData::Microbatch(int64_t iteration, int dp_rank, int mb) const {
  std::vector<int64_t> windows(options_.microbatch_size);
  for (int j = 0; j < options_.microbatch_size; ++j) windows[j] = Window(iteration, dp_rank, mb, j);
  return Gather(file_, options_.seq_len, windows);
}

std::shared_ptr<const std::vector<int64_t>> TokenFileData::Permutation(uint64_t pass) const {
  absl::MutexLock lock(&mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->pass == pass) {
      CachedPass hit = std::move(*it);
      cache_.erase(it);
      cache_.push_back(std::move(hit));
      return cache_.back().perm;
    }
  }
  // Two passes, so a microbatch straddling a pass boundary does not recompute on every row.
  if (cache_.size() == 2) cache_.erase(cache_.begin());
  cache_.push_back({pass, std::make_shared<const std::vector<int64_t>>(
                              ShufflePermutation(*options_.shuffle_seed, pass, windows_))});
  return cache_.back().perm;
}

// --- TokenFileEval ---

absl::StatusOr<TokenFileEval> TokenFileEval::Make(std::string path, absl::string_view dtype,
                                                  int seq_len, int microbatch_size, int batches) {
  for (const auto& [name, value] : {std::pair<const char*, int>{"seq_len", seq_len},
                                    {"microbatch_size", microbatch_size},
                                    {"batches", batches}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(Where(path), ": ", name, " ", value, " < 1"));
    }
  }
  absl::StatusOr<TokenFile> file = TokenFile::Open(std::move(path), dtype);
  if (!file.ok()) return file.status();
  if (file->Windows(seq_len) == 0) return NoWindow(*file, seq_len);
  return TokenFileEval(*std::move(file), seq_len, microbatch_size, batches);
}

TokenFileEval::TokenFileEval(TokenFile file, int seq_len, int microbatch_size, int batches)
    : file_(std::move(file)),
      seq_len_(seq_len),
      microbatch_size_(microbatch_size),
      batches_(batches),
      windows_(file_.Windows(seq_len)) {}

TokenBatch TokenFileEval::Batch(int k) const {
  TORCH_CHECK(k >= 0 && k < batches_, "TokenFileEval: batch ", k, " not in [0, ", batches_, ")");
  std::vector<int64_t> windows(microbatch_size_);
  for (int j = 0; j < microbatch_size_; ++j) {
    windows[j] = (static_cast<int64_t>(k) * microbatch_size_ + j) % windows_;
  }
  return Gather(file_, seq_len_, windows);
}

}  // namespace zpipe::worker::model
