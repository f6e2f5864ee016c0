#include "worker/model/torchscript_archive.h"

#include <caffe2/serialize/versions.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {
namespace {

// Zip record signatures and the fixed sizes of the parts read here (APPNOTE.TXT).
constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64EndOfCentralDirectory = 0x06064b50;
constexpr uint32_t kCentralDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalFileHeader = 0x04034b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kZip64EndSize = 56, kEntrySize = 46,
                 kLocalSize = 30;
constexpr size_t kMaxComment = 0xffff;
constexpr uint32_t kZip64Sentinel = 0xffffffff;
// A version record is a few digits; a central directory of a sane model well under this.
constexpr uint64_t kMaxVersionRecord = 64, kMaxCentralDirectory = 64ull << 20;

uint64_t Le(std::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

class File {
 public:
  explicit File(const std::string& path) : in_(path, std::ios::binary) {
    if (in_) {
      in_.seekg(0, std::ios::end);
      size_ = static_cast<uint64_t>(in_.tellg());
    }
  }
  bool open() const { return static_cast<bool>(in_); }
  uint64_t size() const { return size_; }
  // `n` bytes at `offset`; nullopt past the end.
  std::optional<std::string> Read(uint64_t offset, uint64_t n) {
    if (offset > size_ || n > size_ - offset) return std::nullopt;
    std::string out(n, '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    if (!in_.read(out.data(), static_cast<std::streamsize>(n))) return std::nullopt;
    return out;
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

struct Entry {
  uint16_t method = 0;
  uint64_t compressed = 0;
  uint64_t local_offset = 0;
};

// The central directory's offset and size, from the end record (or its zip64 twin).
absl::StatusOr<std::pair<uint64_t, uint64_t>> CentralDirectory(File& file) {
  const uint64_t tail_size = std::min<uint64_t>(file.size(), kEndSize + kMaxComment);
  const uint64_t tail_start = file.size() - tail_size;
  std::optional<std::string> tail = file.Read(tail_start, tail_size);
  if (!tail || tail->size() < kEndSize) return absl::InvalidArgumentError("not a zip archive");
  for (size_t at = tail->size() - kEndSize + 1; at-- > 0;) {
    if (Le(*tail, at, 4) != kEndOfCentralDirectory) continue;
    uint64_t size = Le(*tail, at + 12, 4), offset = Le(*tail, at + 16, 4);
    if (size == kZip64Sentinel || offset == kZip64Sentinel) {
      const uint64_t end_at = tail_start + at;
      std::optional<std::string> locator =
          end_at >= kLocatorSize ? file.Read(end_at - kLocatorSize, kLocatorSize) : std::nullopt;
      if (!locator || Le(*locator, 0, 4) != kZip64Locator) break;
      std::optional<std::string> end64 = file.Read(Le(*locator, 8, 8), kZip64EndSize);
      if (!end64 || Le(*end64, 0, 4) != kZip64EndOfCentralDirectory) break;
      size = Le(*end64, 40, 8);
      offset = Le(*end64, 48, 8);
    }
    return std::make_pair(offset, size);
  }
  return absl::InvalidArgumentError("not a zip archive (no end of central directory)");
}

// Sizes and offset of a central directory entry, with zip64's extra field where they overflow.
Entry ParseEntry(std::string_view cd, size_t at, size_t name_len, size_t extra_len) {
  Entry e;
  e.method = static_cast<uint16_t>(Le(cd, at + 10, 2));
  e.compressed = Le(cd, at + 20, 4);
  uint64_t uncompressed = Le(cd, at + 24, 4);
  e.local_offset = Le(cd, at + 42, 4);
  std::string_view extra = cd.substr(at + kEntrySize + name_len, extra_len);
  for (size_t x = 0; x + 4 <= extra.size();) {
    const uint64_t id = Le(extra, x, 2), len = Le(extra, x + 2, 2);
    if (x + 4 + len > extra.size()) break;
    if (id == 0x0001) {  // zip64: the overflowing fields, in this order
      size_t f = x + 4;
      for (uint64_t* field : {&uncompressed, &e.compressed, &e.local_offset}) {
        if (*field != kZip64Sentinel) continue;
        if (f + 8 > x + 4 + len) break;
        *field = Le(extra, f, 8);
        f += 8;
      }
    }
    x += 4 + len;
  }
  return e;
}

// "<root>/version" -> 2, "<root>/.data/version" -> 1 (preferred, as LibTorch's reader does),
// anything else -> 0.
int VersionRecordRank(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos || slash == 0) return 0;
  const std::string_view rest = name.substr(slash + 1);
  if (rest == ".data/version") return 1;
  if (rest == "version") return 2;
  return 0;
}

}  // namespace

absl::StatusOr<int64_t> TorchScriptFileFormatVersion(const std::string& path) {
  File file(path);
  if (!file.open()) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  absl::StatusOr<std::pair<uint64_t, uint64_t>> where = CentralDirectory(file);
  if (!where.ok()) return where.status();
  const auto [cd_offset, cd_size] = *where;
  if (cd_size > kMaxCentralDirectory) {
    return absl::InvalidArgumentError("the zip central directory is implausibly large");
  }
  std::optional<std::string> cd = file.Read(cd_offset, cd_size);
  if (!cd) return absl::InvalidArgumentError("the zip central directory lies past the end");
  std::optional<Entry> record;
  int best = 0;
  for (size_t at = 0; at + kEntrySize <= cd->size();) {
    if (Le(*cd, at, 4) != kCentralDirectoryEntry) {
      return absl::InvalidArgumentError("a damaged zip central directory");
    }
    const size_t name_len = Le(*cd, at + 28, 2), extra_len = Le(*cd, at + 30, 2),
                 comment_len = Le(*cd, at + 32, 2);
    if (at + kEntrySize + name_len + extra_len + comment_len > cd->size()) {
      return absl::InvalidArgumentError("a damaged zip central directory");
    }
    const std::string_view name = std::string_view(*cd).substr(at + kEntrySize, name_len);
    if (const int rank = VersionRecordRank(name); rank > 0 && (best == 0 || rank < best)) {
      best = rank;
      record = ParseEntry(*cd, at, name_len, extra_len);
    }
    at += kEntrySize + name_len + extra_len + comment_len;
  }
  if (!record) return absl::InvalidArgumentError("no version record in the archive");
  if (record->method != 0) {
    return absl::InvalidArgumentError("the version record is compressed (torch stores it plain)");
  }
  if (record->compressed > kMaxVersionRecord) {
    return absl::InvalidArgumentError("the version record is not a version number");
  }
  std::optional<std::string> local = file.Read(record->local_offset, kLocalSize);
  if (!local || Le(*local, 0, 4) != kLocalFileHeader) {
    return absl::InvalidArgumentError("a damaged zip local header");
  }
  const uint64_t data_at =
      record->local_offset + kLocalSize + Le(*local, 26, 2) + Le(*local, 28, 2);
  std::optional<std::string> text = file.Read(data_at, record->compressed);
  if (!text) return absl::InvalidArgumentError("the version record lies past the end");
  while (!text->empty() && std::isspace(static_cast<unsigned char>(text->back()))) {
    text->pop_back();
  }
  if (text->empty() || text->size() > 18 ||
      !std::all_of(text->begin(), text->end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("the version record is not a version number ('", *text, "')"));
  }
  return std::stoll(*text);
}

int64_t MaxReadableFileFormatVersion() {
  return static_cast<int64_t>(caffe2::serialize::kMaxSupportedFileFormatVersion);
}

const char* LibTorchVersion() { return TORCH_VERSION; }

}  // namespace zpipe::worker::model
