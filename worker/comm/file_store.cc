#include "worker/comm/file_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;

absl::Status CheckKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxRendezvousKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous key of ", key.size(), " bytes (1..", kMaxRendezvousKeyBytes, ")"));
  }
  return absl::OkStatus();
}

class FileStore final : public KeyValueStore {
 public:
  explicit FileStore(fs::path dir) : dir_(std::move(dir)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    if (absl::Status st = CheckKey(key); !st.ok()) return st;
    if (value.size() > kMaxRendezvousValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rendezvous value of ", value.size(), " bytes (at most ", kMaxRendezvousValueBytes, ")"));
    }
    const fs::path path = PathOf(key);
    const fs::path tmp = absl::StrCat(path.string(), ".tmp.", getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out.flush()) {
        return absl::UnavailableError(absl::StrCat("file store: cannot write ", tmp.string()));
      }
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
      fs::remove(tmp, ec);
      return absl::UnavailableError(
          absl::StrCat("file store: cannot rename to ", path.string(), ": ", ec.message()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(absl::string_view key) override {
    if (absl::Status st = CheckKey(key); !st.ok()) return st;
    std::ifstream in(PathOf(key), std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("rendezvous key '", key, "' not set"));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  absl::StatusOr<std::vector<std::string>> Wait(const std::vector<std::string>& keys,
                                                absl::Time deadline) override {
    std::vector<std::string> values(keys.size());
    std::vector<bool> have(keys.size(), false);
    while (true) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (have[i]) continue;
        absl::StatusOr<std::string> v = Get(keys[i]);
        if (v.ok()) {
          values[i] = *std::move(v);
          have[i] = true;
        } else if (absl::IsNotFound(v.status())) {
          missing.push_back(keys[i]);
        } else {
          return v.status();
        }
      }
      if (missing.empty()) return values;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("rendezvous keys never set: ", absl::StrJoin(missing, ", ")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  fs::path PathOf(absl::string_view key) const { return dir_ / absl::BytesToHexString(key); }

  fs::path dir_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KeyValueStore>> NewFileStore(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file store: '", dir, "' is not a directory we can create"));
  }
  return std::unique_ptr<KeyValueStore>(std::make_unique<FileStore>(dir));
}

}  // namespace zpipe::worker
