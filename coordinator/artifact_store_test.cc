#include "coordinator/artifact_store.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "artifact/artifact_ref.h"
#include "absl/strings/match.h"
#include "artifact/sha256.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {
namespace fs = std::filesystem;

std::string Digest(const std::string& data) {
  artifact::Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

class ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("zpipe_artifact_store_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ArtifactStoreOptions o;
    o.dir = dir_.string();
    o.max_job_bytes = 1000;
    o.retention = absl::Minutes(10);
    auto store = ArtifactStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Uploads `data` in chunks of 7 bytes, claiming `sha256`.
  absl::Status Put(const std::string& data, const std::string& sha256) {
    auto upload = store_->BeginUpload(sha256, data.size());
    if (!upload.ok()) return upload.status();
    for (size_t i = 0; i < data.size(); i += 7) {
      if (absl::Status st = (*upload)->Append(data.substr(i, 7)); !st.ok()) return st;
    }
    return (*upload)->Commit();
  }
  std::string ReadBack(const std::string& sha256) {
    std::string out;
    absl::Status st = store_->Read(sha256, 5, [&](uint64_t total, absl::string_view chunk) {
      EXPECT_LE(chunk.size(), 5u);
      EXPECT_GT(total, 0u);
      out.append(chunk.data(), chunk.size());
      return true;
    });
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }
  size_t TmpFiles() const {
    return std::distance(fs::directory_iterator(dir_ / "tmp"), fs::directory_iterator());
  }

  fs::path dir_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(ArtifactStoreTest, StoresVerifiedBytesUnderTheirDigest) {
  const std::string data = "a model's bytes, streamed in chunks";
  const std::string sha = Digest(data);
  EXPECT_FALSE(store_->Size(sha).has_value());
  ASSERT_TRUE(Put(data, sha).ok());
  EXPECT_EQ(store_->Size(sha), data.size());
  EXPECT_TRUE(fs::exists(dir_ / "sha256" / sha));
  EXPECT_EQ(ReadBack(sha), data);
  EXPECT_EQ(TmpFiles(), 0u);
}

TEST_F(ArtifactStoreTest, RefusesAWrongDigestAndKeepsNothing) {
  const std::string data = "the bytes sent";
  const std::string claimed = Digest("other bytes");
  absl::Status st = Put(data, claimed);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(Digest(data)), std::string::npos) << st;
  EXPECT_NE(st.message().find(claimed), std::string::npos) << st;
  EXPECT_FALSE(store_->Size(claimed).has_value());
  EXPECT_EQ(TmpFiles(), 0u);
}

TEST_F(ArtifactStoreTest, RefusesWrongSizesAndMalformedDigests) {
  const std::string data = "twelve bytes";
  auto upload = store_->BeginUpload(Digest(data), data.size() - 1);
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ((*upload)->Append(data).code(), absl::StatusCode::kInvalidArgument);
  auto short_upload = store_->BeginUpload(Digest(data), data.size() + 1);
  ASSERT_TRUE((*short_upload)->Append(data).ok());
  EXPECT_EQ((*short_upload)->Commit().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload("ABC", 1).status().code(), absl::StatusCode::kInvalidArgument);
  upload->reset();
  short_upload->reset();
  EXPECT_EQ(TmpFiles(), 0u);  // dropped uploads leave nothing
}

TEST_F(ArtifactStoreTest, CapNamesItselfAndTheFlag) {
  absl::Status st = store_->BeginUpload(std::string(64, 'a'), 1001).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("1000 bytes"), std::string::npos) << st;
  EXPECT_NE(st.message().find("--artifact-max-job-bytes"), std::string::npos) << st;

  // Two artifacts that fit alone, not together.
  const std::string a(600, 'a'), b(600, 'b');
  ASSERT_TRUE(Put(a, Digest(a)).ok());
  ASSERT_TRUE(Put(b, Digest(b)).ok());
  JobSpec spec;
  spec.model = TorchScriptConfig{artifact::MakeArtifactRef(Digest(a)), {}};
  spec.data_file.path = artifact::MakeArtifactRef(Digest(a));  // the same one counts once
  EXPECT_TRUE(store_->CheckSpec(spec).ok());
  spec.data_file.path = artifact::MakeArtifactRef(Digest(b));
  st = store_->CheckSpec(spec);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("--artifact-max-job-bytes"), std::string::npos) << st;
}

TEST_F(ArtifactStoreTest, CheckSpecNamesAMissingArtifactsField) {
  JobSpec spec;
  spec.data_file.path = "plain/path.bin";  // not an artifact: not the store's business
  EXPECT_TRUE(store_->CheckSpec(spec).ok());
  EXPECT_TRUE(CheckArtifacts(nullptr, spec).ok());
  spec.eval.path = artifact::MakeArtifactRef(std::string(64, 'c'));
  absl::Status st = store_->CheckSpec(spec);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(st.message(), "spec.eval.path: ")) << st;
  EXPECT_EQ(CheckArtifacts(nullptr, spec).code(), absl::StatusCode::kUnavailable);
  spec.eval.path = "artifact:sha256:short";
  EXPECT_EQ(store_->CheckSpec(spec).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ArtifactStoreTest, SweepKeepsWhatJobsNeed) {
  const std::string live = "live", ended = "ended", fresh = "fresh", orphan = "orphan";
  for (const std::string* d : {&live, &ended, &fresh, &orphan}) {
    ASSERT_TRUE(Put(*d, Digest(*d)).ok());
  }
  const absl::Time now = absl::Now();
  // Every upload is "now"; look from an hour later.
  const absl::Time later = now + absl::Hours(1);
  absl::flat_hash_map<std::string, absl::Time> in_use = {
      {Digest(live), absl::InfiniteFuture()},          // a job that is not terminal names it
      {Digest(ended), now + absl::Minutes(20)},         // ended 40 min before `later`: goes
      {Digest(fresh), later - absl::Minutes(5)},        // ended 5 min before: within retention
  };
  EXPECT_EQ(store_->Sweep(in_use, later), 2);  // `ended` and `orphan`
  EXPECT_TRUE(store_->Size(Digest(live)).has_value());
  EXPECT_TRUE(store_->Size(Digest(fresh)).has_value());
  EXPECT_FALSE(store_->Size(Digest(ended)).has_value());
  EXPECT_FALSE(store_->Size(Digest(orphan)).has_value());
  // Nothing is deleted within the retention of its upload.
  EXPECT_EQ(store_->Sweep({}, now + absl::Minutes(1)), 0);
}

TEST_F(ArtifactStoreTest, OpenClearsInterruptedUploads) {
  std::ofstream(dir_ / "tmp" / "upload-leftover") << "partial";
  ArtifactStoreOptions o = store_->options();
  ASSERT_TRUE(ArtifactStore::Open(o).ok());
  EXPECT_EQ(TmpFiles(), 0u);
}

}  // namespace
}  // namespace zpipe::coordinator
