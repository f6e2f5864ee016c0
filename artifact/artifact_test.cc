#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "artifact/artifact_ref.h"
#include "artifact/sha256.h"
#include "gtest/gtest.h"

namespace zpipe::artifact {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256Test, KnownDigests) {
  Sha256 empty;
  EXPECT_EQ(empty.HexDigest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc;
  abc.Update("a");
  abc.Update("bc");  // streaming: the same as one Update("abc")
  EXPECT_EQ(abc.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, HashFileStreamsLargeFiles) {
  const std::string path = std::filesystem::temp_directory_path() / "zpipe_artifact_test.bin";
  std::string data(3 * (1 << 20) + 17, '\0');  // more than one read buffer
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::ofstream(path, std::ios::binary) << data;
  Sha256 whole;
  whole.Update(data);
  absl::StatusOr<FileDigest> d = HashFile(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sha256, whole.HexDigest());
  EXPECT_EQ(d->size, data.size());
  std::remove(path.c_str());
  EXPECT_EQ(HashFile(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(ArtifactRefTest, RoundTripAndRejects) {
  const std::string hex(64, 'a');
  EXPECT_EQ(MakeArtifactRef(hex), "artifact:sha256:" + hex);
  EXPECT_EQ(*ParseArtifactRef(MakeArtifactRef(hex)), hex);
  EXPECT_TRUE(IsArtifactRef("artifact:md5:x"));
  EXPECT_FALSE(IsArtifactRef("data/train.bin"));
  for (const std::string& bad : {"artifact:md5:" + hex, "artifact:sha256:" + hex.substr(1),
                                "artifact:sha256:" + std::string(64, 'A'),
                                "artifact:sha256:" + hex + "0"}) {
    absl::StatusOr<std::string> parsed = ParseArtifactRef(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("artifact:sha256:<64"), std::string::npos);
  }
}

TEST(ArtifactRefTest, FileFieldsNameOnlyWhatWorkersRead) {
  zpipe::v1::JobSpec spec;
  spec.mutable_model()->mutable_gpt();
  spec.mutable_checkpoint()->set_dir("ckpt");
  EXPECT_TRUE(FileFields(spec).empty());
  spec.mutable_model()->mutable_torchscript()->set_path("m.pt");
  spec.mutable_data()->set_path("t.bin");
  spec.mutable_eval()->set_path("e.bin");
  std::vector<FileField> fields = FileFields(spec);
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_STREQ(fields[0].name, "spec.model.torchscript.path");
  *fields[1].path = "artifact:sha256:x";
  EXPECT_EQ(spec.data().path(), "artifact:sha256:x");
  EXPECT_EQ(*fields[2].path, "e.bin");
}

}  // namespace
}  // namespace zpipe::artifact
