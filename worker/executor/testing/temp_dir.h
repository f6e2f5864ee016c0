// Test support: a fresh directory under the system temp dir, removed with everything in it when
// the object goes. Names are unique per process and object (prefix-pid-counter).
#ifndef ZPIPE_WORKER_EXECUTOR_TESTING_TEMP_DIR_H_
#define ZPIPE_WORKER_EXECUTOR_TESTING_TEMP_DIR_H_

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "zpipe-test") {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat(prefix, "-", ::getpid(), "-", counter_++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace zpipe::worker::testing

#endif  // ZPIPE_WORKER_EXECUTOR_TESTING_TEMP_DIR_H_
