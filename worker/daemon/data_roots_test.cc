#include "worker/daemon/data_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zpipe::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("zpipe_data_roots_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_ / "data" / "sub");
    fs::create_directories(base_ / "data2");
    fs::create_directories(base_ / "elsewhere");
    std::ofstream(base_ / "data" / "train.bin") << "x";
  }
  void TearDown() override { fs::remove_all(base_); }
  std::string P(const std::string& rel) const { return (base_ / rel).string(); }

  fs::path base_;
};

TEST_F(DataRootsTest, PathsUnderARootPassOthersAreRefusedNamingFieldPathAndFlag) {
  auto roots = DataRoots::Make({P("data")});
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_TRUE(roots->Check("data.path", P("data/train.bin")).ok());
  EXPECT_TRUE(roots->Check("checkpoint.dir", P("data")).ok());
  EXPECT_TRUE(roots->Check("checkpoint.dir", P("data/sub/not-yet/ckpt")).ok());  // made later
  EXPECT_TRUE(roots->Check("data.path", "").ok());

  absl::Status outside = roots->Check("checkpoint.dir", P("elsewhere/ckpt"));
  EXPECT_EQ(outside.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(outside.message(), HasSubstr("checkpoint.dir '" + P("elsewhere/ckpt") + "'"));
  EXPECT_THAT(outside.message(), HasSubstr("--data-root"));
  // A sibling whose name starts like the root is not under it.
  EXPECT_FALSE(roots->Check("data.path", P("data2/x.bin")).ok());
}

TEST_F(DataRootsTest, DotDotAndSymlinksAreResolvedFirst) {
  auto roots = DataRoots::Make({P("data")});
  ASSERT_TRUE(roots.ok());
  absl::Status dotdot = roots->Check("data.path", P("data/sub/../../elsewhere/x.bin"));
  EXPECT_EQ(dotdot.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(dotdot.message(), HasSubstr("resolves to " + P("elsewhere/x.bin")));
  EXPECT_TRUE(roots->Check("data.path", P("data/sub/../train.bin")).ok());

  fs::create_directory_symlink(base_ / "elsewhere", base_ / "data" / "escape");
  absl::Status link = roots->Check("checkpoint.dir", P("data/escape/ckpt"));
  EXPECT_EQ(link.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(link.message(), HasSubstr("resolves to " + P("elsewhere/ckpt")));

  // A root given through a symlink is the folder it points to.
  fs::create_directory_symlink(base_ / "data", base_ / "data-link");
  auto linked = DataRoots::Make({P("data-link")});
  ASSERT_TRUE(linked.ok());
  EXPECT_TRUE(linked->Check("data.path", P("data/train.bin")).ok());
}

TEST_F(DataRootsTest, DefaultIsTheWorkingDirectoryAndRelativePathsAreAgainstIt) {
  const fs::path cwd = fs::current_path();
  fs::current_path(base_ / "data");
  auto roots = DataRoots::Make({});
  ASSERT_TRUE(roots.ok());
  EXPECT_TRUE(roots->Check("data.path", "train.bin").ok());
  EXPECT_TRUE(roots->Check("checkpoint.dir", "./checkpoints").ok());
  EXPECT_FALSE(roots->Check("checkpoint.dir", "../elsewhere").ok());
  EXPECT_FALSE(roots->Check("checkpoint.dir", "/etc").ok());
  fs::current_path(cwd);
}

TEST_F(DataRootsTest, CheckJobCoversModelDataEvalAndCheckpoints) {
  auto roots = DataRoots::Make({P("data")});
  ASSERT_TRUE(roots.ok());
  JobSettings job;
  job.model = TorchScriptSource{.path = P("data/model.pt"), .cuts = {}};
  job.data = TokenDataConfig{.path = P("data/train.bin"), .dtype = "uint16", .shuffle_seed = {}};
  job.eval = EvalConfig{.path = P("data/eval.bin"), .every = 1, .batches = 1};
  EXPECT_TRUE(roots->CheckJob(job).ok());  // checkpoints off: no dir is touched
  job.checkpoint =
      CheckpointConfig{.dir = P("elsewhere"), .every = 2, .keep = 0, .skip_errors = false};
  EXPECT_THAT(roots->CheckJob(job).message(), HasSubstr("checkpoint.dir"));
  job.checkpoint->dir = P("data/ckpt");
  EXPECT_TRUE(roots->CheckJob(job).ok());
  job.eval->path = P("elsewhere/eval.bin");
  EXPECT_THAT(roots->CheckJob(job).message(), HasSubstr("eval.path"));
  job.eval.reset();
  job.model = TorchScriptSource{.path = "/etc/passwd", .cuts = {}};
  EXPECT_THAT(roots->CheckJob(job).message(), HasSubstr("model.torchscript.path '/etc/passwd'"));
  // A Python model is code the worker runs: the same rule, before anything is imported.
  job.model = PythonSource{.file = P("data/model.py"), .factory = "build_model", .args_json = "",
                           .cuts = {}};
  EXPECT_TRUE(roots->CheckJob(job).ok());
  std::get<PythonSource>(job.model).file = P("elsewhere/../elsewhere/model.py");
  EXPECT_THAT(roots->CheckJob(job).message(), HasSubstr("model.python.file"));
}

TEST_F(DataRootsTest, ARootThatIsNotADirectoryIsRefusedNamingTheFlag) {
  auto missing = DataRoots::Make({P("nope")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--data-root " + P("nope")));
  auto file = DataRoots::Make({P("data/train.bin")});
  EXPECT_THAT(file.status().message(), HasSubstr("not a directory"));
}

}  // namespace
}  // namespace zpipe::worker
