// A fresh directory under the system's temporary directory for one test, removed afterwards:
// PREFIX-PID-TESTNAME, so parallel test processes never share one.
#ifndef ZPIPE_TESTS_SUPPORT_TEMP_DIR_H_
#define ZPIPE_TESTS_SUPPORT_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace zpipe::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat(prefix, "-", ::getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace zpipe::testing

#endif  // ZPIPE_TESTS_SUPPORT_TEMP_DIR_H_
