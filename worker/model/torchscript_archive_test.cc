// TorchScriptFileFormatVersion: the version record of archives LibTorch writes (a saved module,
// and a bare archive claiming a version above what this LibTorch reads), and refusals of files
// that are not such archives.
#include "worker/model/torchscript_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {
namespace {

class TorchScriptArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("zpipe-archive-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TorchScriptArchiveTest, ReadsTheVersionOfASavedModule) {
  torch::jit::Module m("M");
  m.register_parameter("w", torch::ones({3}), false);
  m.define("def forward(self, x):\n    return x * self.w\n");
  m.save(Path("m.pt"));
  absl::StatusOr<int64_t> version = TorchScriptFileFormatVersion(Path("m.pt"));
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_GE(*version, 1);
  EXPECT_LE(*version, MaxReadableFileFormatVersion());
}

TEST_F(TorchScriptArchiveTest, ReadsAVersionAboveWhatLibTorchReads) {
  const int64_t newer = MaxReadableFileFormatVersion() + 3;
  {
    caffe2::serialize::PyTorchStreamWriter writer(Path("newer.pt"));
    writer.setMinVersion(newer);
    writer.writeRecord("data.pkl", "x", 1);
    writer.writeEndOfFile();
  }
  EXPECT_THROW(torch::jit::load(Path("newer.pt")), c10::Error);
  absl::StatusOr<int64_t> version = TorchScriptFileFormatVersion(Path("newer.pt"));
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, newer);
}

TEST_F(TorchScriptArchiveTest, RefusesWhatIsNotATorchArchive) {
  EXPECT_EQ(TorchScriptFileFormatVersion(Path("missing.pt")).status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(Path("junk.pt")) << "not a model";
  EXPECT_EQ(TorchScriptFileFormatVersion(Path("junk.pt")).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::ofstream(Path("empty.pt")).close();
  EXPECT_EQ(TorchScriptFileFormatVersion(Path("empty.pt")).status().code(),
            absl::StatusCode::kInvalidArgument);
  {
    caffe2::serialize::PyTorchStreamWriter writer(Path("other.pt"));
    writer.writeRecord("data.pkl", "x", 1);
    writer.writeEndOfFile();
  }
  // A torch archive has its version record.
  EXPECT_TRUE(TorchScriptFileFormatVersion(Path("other.pt")).ok());
  EXPECT_NE(std::string(LibTorchVersion()).find('.'), std::string::npos);
}

}  // namespace
}  // namespace zpipe::worker::model
