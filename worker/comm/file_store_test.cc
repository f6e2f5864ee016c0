#include "worker/comm/file_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

namespace zpipe::worker {
namespace {

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "zpipe-file-store-XXXXXX").string();
  return mkdtemp(tmpl.data());
}

TEST(FileStoreTest, SetGetOverwriteAndMissing) {
  const std::string dir = TempDir();
  auto store = NewFileStore(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(absl::IsNotFound((*store)->Get("job/a").status()));
  ASSERT_TRUE((*store)->Set("job/a", std::string("x\0y", 3)).ok());
  EXPECT_EQ(*(*store)->Get("job/a"), std::string("x\0y", 3));
  ASSERT_TRUE((*store)->Set("job/a", "second").ok());
  EXPECT_EQ(*(*store)->Get("job/a"), "second");
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->Set("", "v")));
  EXPECT_TRUE(absl::IsInvalidArgument((*store)->Set(std::string(513, 'k'), "v")));
  std::filesystem::remove_all(dir);
}

TEST(FileStoreTest, WaitSeesAKeyAnotherProcessSets) {
  const std::string dir = TempDir();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto store = NewFileStore(dir);
    _exit(store.ok() && (*store)->Set("peer/addr", "127.0.0.1:1234").ok() ? 0 : 1);
  }
  auto store = NewFileStore(dir);
  ASSERT_TRUE(store.ok());
  auto values = (*store)->Wait({"peer/addr"}, absl::Now() + absl::Seconds(10));
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], "127.0.0.1:1234");
  std::filesystem::remove_all(dir);
}

TEST(FileStoreTest, WaitNamesTheMissingKeysAtTheDeadline) {
  const std::string dir = TempDir();
  auto store = NewFileStore(dir);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("here", "1").ok());
  auto values = (*store)->Wait({"here", "absent"}, absl::Now() + absl::Milliseconds(50));
  ASSERT_TRUE(absl::IsDeadlineExceeded(values.status()));
  EXPECT_NE(values.status().message().find("absent"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zpipe::worker
