#include "worker/daemon/artifact_cache.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "artifact/artifact_ref.h"
#include "artifact/sha256.h"
#include "gtest/gtest.h"

namespace zpipe::worker {
namespace {
namespace fs = std::filesystem;

std::string Digest(const std::string& data) {
  artifact::Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

// Serves what it holds in 3-byte chunks and counts the fetches; `lie` serves other bytes.
class FakeSource : public ArtifactSource {
 public:
  absl::Status Fetch(const std::string& sha256,
                     const std::function<absl::Status(absl::string_view)>& sink) override {
    ++fetches;
    auto it = held.find(sha256);
    if (it == held.end()) return absl::NotFoundError("not uploaded");
    const std::string bytes = lie ? it->second + "!" : it->second;
    for (size_t i = 0; i < bytes.size(); i += 3) {
      if (absl::Status st = sink(absl::string_view(bytes).substr(i, 3)); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  std::map<std::string, std::string> held;
  bool lie = false;
  int fetches = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ArtifactCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("zpipe_artifact_cache_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto cache = ArtifactCache::Open(dir_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::unique_ptr<ArtifactCache> cache_;
};

TEST_F(ArtifactCacheTest, FetchesOnceThenReusesTheVerifiedCopy) {
  FakeSource source;
  const std::string model = "torchscript bytes";
  source.held[Digest(model)] = model;
  zpipe::v1::JobSpec spec;
  spec.mutable_model()->mutable_torchscript()->set_path(artifact::MakeArtifactRef(Digest(model)));
  spec.mutable_data()->set_path("plain/train.bin");  // not an artifact: left alone
  ASSERT_TRUE(cache_->Resolve(spec, source).ok());
  EXPECT_EQ(spec.model().torchscript().path(), (dir_ / Digest(model)).string());
  EXPECT_EQ(ReadFile(spec.model().torchscript().path()), model);
  EXPECT_EQ(spec.data().path(), "plain/train.bin");
  EXPECT_EQ(source.fetches, 1);

  // A second job naming it: a cache hit.
  absl::StatusOr<std::string> again = cache_->Get(Digest(model), source);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(source.fetches, 1);

  // A copy that was changed on disk is not used: fetched again.
  std::ofstream(*again, std::ios::binary) << "tampered";
  ASSERT_TRUE(cache_->Get(Digest(model), source).ok());
  EXPECT_EQ(source.fetches, 2);
  EXPECT_EQ(ReadFile(*again), model);
}

TEST_F(ArtifactCacheTest, RefusesBytesThatDoNotMatchTheDigest) {
  FakeSource source;
  const std::string data = "tokens";
  source.held[Digest(data)] = data;
  source.lie = true;
  zpipe::v1::JobSpec spec;
  spec.mutable_data()->set_path(artifact::MakeArtifactRef(Digest(data)));
  absl::Status st = cache_->Resolve(spec, source);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(st.message(), "spec.data.path: artifact sha256:" + Digest(data)))
      << st;
  EXPECT_NE(st.message().find(Digest(data + "!")), std::string::npos) << st;
  EXPECT_FALSE(fs::exists(dir_ / Digest(data)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(ArtifactCacheTest, MissingArtifactNamesTheField) {
  FakeSource source;
  zpipe::v1::JobSpec spec;
  spec.mutable_eval()->set_path(artifact::MakeArtifactRef(std::string(64, 'e')));
  absl::Status st = cache_->Resolve(spec, source);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StartsWith(st.message(), "spec.eval.path: ")) << st;
  spec.mutable_eval()->set_path("artifact:sha256:nothex");
  EXPECT_EQ(cache_->Resolve(spec, source).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zpipe::worker
