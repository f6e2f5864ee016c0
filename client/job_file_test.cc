#include "client/job_file.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zpipe {
namespace {

using ::testing::HasSubstr;

constexpr char kDesignExample[] = R"(name: gpt-zbv-demo
model:
  gpt: {layers: 8, hidden: 256, heads: 4, seq_len: 128, vocab: 512}
parallel: {pipeline: 4, data: 1}
schedule: {kind: zb-v, memory_limit: auto}
batch: {microbatches: 8, microbatch_size: 4}
train: {iterations: 50, optimizer: adamw, lr: 3.0e-4, seed: 1}
grad_sync: {bucket_mb: 25, overlap: true}
checkpoint: {every: 20, dir: ./checkpoints}
)";

TEST(JobFileTest, ParsesTheDesignExample) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kDesignExample, JobFileFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "gpt-zbv-demo");
  EXPECT_EQ(spec->model().gpt().layers(), 8);
  EXPECT_EQ(spec->model().gpt().vocab(), 512);
  EXPECT_EQ(spec->parallel().pipeline(), 4);
  EXPECT_EQ(spec->schedule().kind(), "zb-v");
  EXPECT_FALSE(spec->schedule().has_memory_limit());  // auto = unset
  EXPECT_EQ(spec->batch().microbatch_size(), 4);
  EXPECT_DOUBLE_EQ(spec->train().lr(), 3.0e-4);
  EXPECT_EQ(spec->train().seed(), 1u);
  EXPECT_TRUE(spec->grad_sync().has_overlap());
  EXPECT_TRUE(spec->grad_sync().overlap());
  EXPECT_EQ(spec->checkpoint().dir(), "./checkpoints");
}

TEST(JobFileTest, ParsesCheckpointKeepAndOnError) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "checkpoint: {every: 5, dir: ckpt, keep: 3, on_error: skip}\n", JobFileFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().keep(), 3);
  EXPECT_EQ(spec->checkpoint().on_error(), v1::CHECKPOINT_ON_ERROR_SKIP);
  spec = ParseJobSpec(R"({"checkpoint": {"on_error": "fail"}})", JobFileFormat::kAuto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().on_error(), v1::CHECKPOINT_ON_ERROR_FAIL);
}

TEST(JobFileTest, ParsesJsonWithTheSameFields) {
  constexpr char kJson[] = R"({
  "name": "syn",
  "model": {"synthetic": {"forward_ms": 10, "backward_ms": 10, "weight_ms": 8.5}},
  "parallel": {"pipeline": 2},
  "schedule": {"kind": "1f1b", "memory_limit": 3},
  "device": "cuda"
})";
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(kJson, JobFileFormat::kAuto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->model().synthetic().weight_ms(), 8.5);
  EXPECT_TRUE(spec->schedule().has_memory_limit());
  EXPECT_DOUBLE_EQ(spec->schedule().memory_limit(), 3.0);
  EXPECT_EQ(spec->device(), v1::DEVICE_KIND_CUDA);
}

struct BadCase {
  std::string name;
  JobFileFormat format;
  std::string text;
  std::string expected;  // substring of the error, including the line
};

// The cases live in client/testdata/job_file_errors.json, which the Python client's test
// (tests/python/job_file_agreement_test.py) runs through zpipe and zeropipe.load_spec as well.
std::vector<BadCase> LoadBadCases() {
  std::ifstream in(std::string(ZPIPE_SOURCE_DIR) + "/client/testdata/job_file_errors.json");
  const nlohmann::json cases = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::vector<BadCase> out;
  for (const nlohmann::json& c : cases.is_array() ? cases : nlohmann::json::array()) {
    out.push_back({c.at("name").get<std::string>(),
                   c.at("format") == "json" ? JobFileFormat::kJson : JobFileFormat::kYaml,
                   c.at("text").get<std::string>(), c.at("expected").get<std::string>()});
  }
  return out;
}

class JobFileErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(JobFileErrorTest, NamesTheFieldAndLine) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(GetParam().text, GetParam().format);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().expected));
}

TEST(JobFileErrorCasesTest, AreThere) { EXPECT_GE(LoadBadCases().size(), 22u); }

INSTANTIATE_TEST_SUITE_P(All, JobFileErrorTest, ::testing::ValuesIn(LoadBadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

TEST(JobFileTest, LabelsAreAMapOfStrings) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: a\nlabels:\n  team: nlp\n  example.com/run: \"7\"\n", JobFileFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->labels_size(), 2);
  EXPECT_EQ(spec->labels().at("team"), "nlp");
  EXPECT_EQ(spec->labels().at("example.com/run"), "7");
  spec = ParseJobSpec(R"({"name": "a", "labels": {"team": "nlp"}})", JobFileFormat::kJson);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->labels().at("team"), "nlp");
}

TEST(JobFileTest, ParsesTheOwnModelFieldsAndResolvesInputPathsBesideTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("zpipe-jobfile-", getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "job.yaml";
  std::ofstream(file) << R"(name: own
model:
  torchscript: {path: model.pt, cuts: [1, 3, 5]}
data: {path: data/train.bin, dtype: uint32, shuffle_seed: 7, seq_len: 64}
eval: {path: /abs/eval.bin, every: 10, batches: 2}
parallel: {pipeline: 2}
schedule: {kind: zb-v}
batch: {microbatches: 4, microbatch_size: 2}
train:
  iterations: 20
  lr: 1.0e-3
  weight_decay: 0.1
  betas: [0.9, 0.95]
  eps: 1.0e-6
  clip_grad_norm: 0.5
  lr_schedule: {warmup: 2, decay: cosine, min_lr: 1.0e-4}
checkpoint: {every: 5, dir: ckpt}
)";
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(file.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().torchscript().path(), (dir / "model.pt").string());
  EXPECT_THAT(std::vector<int>(spec->model().torchscript().cuts().begin(),
                               spec->model().torchscript().cuts().end()),
              ::testing::ElementsAre(1, 3, 5));
  EXPECT_EQ(spec->data().path(), (dir / "data/train.bin").string());
  EXPECT_EQ(spec->data().dtype(), "uint32");
  ASSERT_TRUE(spec->data().has_shuffle_seed());
  EXPECT_EQ(spec->data().shuffle_seed(), 7u);
  EXPECT_EQ(spec->data().seq_len(), 64);
  EXPECT_EQ(spec->eval().path(), "/abs/eval.bin");  // absolute: kept
  EXPECT_EQ(spec->eval().every(), 10);
  EXPECT_DOUBLE_EQ(spec->train().weight_decay(), 0.1);
  ASSERT_EQ(spec->train().betas_size(), 2);
  EXPECT_DOUBLE_EQ(spec->train().betas(1), 0.95);
  EXPECT_DOUBLE_EQ(spec->train().eps(), 1e-6);
  EXPECT_DOUBLE_EQ(spec->train().clip_grad_norm(), 0.5);
  EXPECT_EQ(spec->train().lr_schedule().decay(), "cosine");
  EXPECT_EQ(spec->train().lr_schedule().warmup(), 2);
  EXPECT_EQ(spec->checkpoint().dir(), "ckpt");  // the workers' directory: left as written
}

// model.python: the file resolves beside the job file like a model file; args, a map of any
// shape, travels as JSON text with its scalars typed as YAML means them.
TEST(JobFileTest, APythonModelsArgsBecomeJsonText) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("zpipe-jobfile-py-", getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "job.yaml";
  std::ofstream(file) << R"(name: py
model:
  python:
    file: model.py
    factory: build_gpt2
    args: {n_layer: 2, dropout: 0.0, name: "12", tie: false, sizes: [1, 2], extra: {a: x}}
    cuts: [2]
)";
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(file.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().python().file(), (dir / "model.py").string());
  EXPECT_EQ(spec->model().python().factory(), "build_gpt2");
  EXPECT_EQ(spec->model().python().args(),
            R"({"dropout":0.0,"extra":{"a":"x"},"n_layer":2,"name":"12","sizes":[1,2],)"
            R"("tie":false})");
  ASSERT_EQ(spec->model().python().cuts_size(), 1);
  // The text itself, as a printed spec holds it, reads back unchanged (errors:
  // testdata/job_file_errors.json).
  absl::StatusOr<v1::JobSpec> printed =
      ParseJobSpec(R"({"model": {"python": {"file": "m.py", "args": "{\"n_layer\":2}"}}})",
                   JobFileFormat::kJson);
  ASSERT_TRUE(printed.ok()) << printed.status();
  EXPECT_EQ(printed->model().python().args(), R"({"n_layer":2})");
}

// The coordinator's range errors name a field path but no line (coordinator/spec_validator.h);
// the CLI points them at the job file.
class LocateInJobFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("zpipe-locate-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(LocateInJobFileTest, NamesTheLineOfARangeErrorInYaml) {
  const std::string path = Write("job.yaml", R"(name: neg
model:
  gpt: {layers: 8, hidden: 256, heads: 4, seq_len: 128, vocab: 512}
parallel: {pipeline: 2}
train:
  iterations: 10
  betas: [0.9,
          1.5]
batch:
  microbatch_size: 2
  # negative on purpose
  microbatches: -3
)");
  ASSERT_TRUE(LoadJobFile(path).ok());  // in range is the coordinator's check, not the reader's
  const absl::Status located = LocateInJobFile(
      absl::InvalidArgumentError("spec.batch.microbatches: must be in [1, 4096], got -3"), path);
  EXPECT_EQ(located.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(located.message(), path + ":12: batch.microbatches: must be in [1, 4096], got -3");
  // A list element; a field left to its default points at the nearest enclosing one written.
  EXPECT_EQ(LocateInJobFile(absl::InvalidArgumentError("spec.train.betas[1]: must be < 1"), path)
                .message(),
            path + ":8: train.betas[1]: must be < 1");
  EXPECT_EQ(
      LocateInJobFile(absl::InvalidArgumentError("spec.parallel.data: must be >= 1"), path)
          .message(),
      path + ":4: parallel.data: must be >= 1");
}

TEST_F(LocateInJobFileTest, NamesTheLineInJson) {
  const std::string path =
      Write("job.json", "{\n  \"name\": \"neg\",\n  \"batch\": {\n    \"microbatches\": -3\n  }\n}\n");
  EXPECT_EQ(LocateInJobFile(absl::InvalidArgumentError(
                                "spec.batch.microbatches: must be in [1, 4096], got -3"),
                            path)
                .message(),
            path + ":4: batch.microbatches: must be in [1, 4096], got -3");
}

TEST_F(LocateInJobFileTest, LeavesOtherErrorsAlone) {
  const std::string path = Write("job.yaml", "name: x\n");
  for (const absl::Status& st :
       {absl::InvalidArgumentError("spec.batch.microbatches: must be >= 1"),  // not in the file
        absl::InvalidArgumentError("job_id: must be 1..64 characters"),
        absl::NotFoundError("spec.name: no such job"),
        absl::ResourceExhaustedError("the --max-pending-jobs limit")}) {
    EXPECT_EQ(LocateInJobFile(st, path), st);
  }
  const absl::Status missing = absl::InvalidArgumentError("spec.name: too long");
  EXPECT_EQ(LocateInJobFile(missing, (dir_ / "gone.yaml").string()), missing);
}

// A number of 400 digits is not echoed back whole: its first 32 characters, its length and the
// range allowed.
TEST(JobFileTest, AnOverflowingNumberIsCutAndTheRangeNamed) {
  const std::string digits(400, '7');
  absl::StatusOr<v1::JobSpec> json =
      ParseJobSpec(absl::StrCat("{\"name\": \"x\",\n\"batch\": {\"microbatches\": ", digits, "e9}}"),
                   JobFileFormat::kJson);
  ASSERT_FALSE(json.ok());
  const std::string message(json.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("line 2: number out of range: '",
                                              digits.substr(0, 32), "...' (402 characters)")));
  EXPECT_THAT(message, HasSubstr("within +-1.7976931348623157e308"));
  EXPECT_LT(message.size(), 250u) << message;

  absl::StatusOr<v1::JobSpec> yaml =
      ParseJobSpec(absl::StrCat("batch:\n  microbatches: ", digits, "\n"), JobFileFormat::kYaml);
  ASSERT_FALSE(yaml.ok());
  EXPECT_EQ(yaml.status().message(),
            absl::StrCat("line 2: field 'batch.microbatches' expects a 32-bit integer, in "
                         "[-2147483648, 2147483647], got the number '",
                         digits.substr(0, 32), "...' (400 characters)"));
  absl::StatusOr<v1::JobSpec> seed =
      ParseJobSpec(absl::StrCat("train: {seed: ", digits, "}\n"), JobFileFormat::kYaml);
  ASSERT_FALSE(seed.ok());
  EXPECT_THAT(std::string(seed.status().message()),
              HasSubstr("expects a 64-bit non-negative integer, in [0, 18446744073709551615]"));
  EXPECT_LT(seed.status().message().size(), 250u);
}

TEST(JobFileTest, StringsMustBeUtf8) {
  // Protobuf refuses to serialize a string field that is not UTF-8, so the reader names it.
  for (const char* bad : {"name: caf\xe9\n", "name: \"\xc0\xaf\"\n", "name: x\xed\xa0\x80\n"}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(bad, JobFileFormat::kAuto);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr("line 1: field 'name' is not UTF-8 text"));
  }
  // JSON's parser refuses such text itself, as a syntax error on its line.
  absl::StatusOr<v1::JobSpec> json = ParseJobSpec("{\"name\": \"a\xff\"}", JobFileFormat::kJson);
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(json.status().message(), HasSubstr("line 1"));
  absl::StatusOr<v1::JobSpec> ok =
      ParseJobSpec("name: caf\xc3\xa9-\xf0\x9f\x9a\x80\n", JobFileFormat::kYaml);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->name(), "caf\xc3\xa9-\xf0\x9f\x9a\x80");
}

// `zpipe submit -`: text from a stream, as ParseJobSpec reads it; no path, so no prefix and
// relative paths as written.
TEST(JobFileTest, ReadJobSpecReadsAStreamAsText) {
  std::istringstream yaml("name: s\ndata: {path: t.bin}\n");
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpec(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "t.bin");
  std::istringstream json("{\"name\": \"s\",\n \"nme\": 1}");
  EXPECT_THAT(std::string(ReadJobSpec(json).status().message()),
              ::testing::StartsWith("line 2: unknown field 'nme'"));
  std::istringstream big(std::string(kMaxJobFileBytes + 10, '#'));
  EXPECT_THAT(std::string(ReadJobSpec(big).status().message()),
              HasSubstr("the job-file size limit"));
}

TEST(JobFileTest, LoadJobFilePrefixesThePath) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile("/nonexistent/job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("/nonexistent/job.yaml"));
}

// Hostile job files (issue 11): each must fail fast with INVALID_ARGUMENT naming the line and the
// limit, without growing or crashing.

// "Billion laughs": nine levels of nine aliases each, 9^9 = 387 million scalars once expanded,
// in a file of a few hundred bytes. yaml-cpp shares aliased nodes, so only the tree copy grows.
std::string BillionLaughsYaml() {
  std::string text = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int level = 1; level <= 8; ++level) {
    const std::string prev = absl::StrCat("*l", level - 1);
    absl::StrAppend(&text, "l", level, ": &l", level, " [", prev);
    for (int i = 1; i < 9; ++i) absl::StrAppend(&text, ", ", prev);
    absl::StrAppend(&text, "]\n");
  }
  absl::StrAppend(&text, "name: *l8\n");
  return text;
}

double SecondsToParse(const std::string& text, JobFileFormat format, absl::Status* status) {
  const auto t0 = std::chrono::steady_clock::now();
  *status = ParseJobSpec(text, format).status();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JobFileLimitsTest, BillionLaughsFailsQuicklyAtTheExpansionLimit) {
  const std::string text = BillionLaughsYaml();
  ASSERT_LT(text.size(), 600u);
  absl::Status status;
  const double seconds = SecondsToParse(text, JobFileFormat::kYaml, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("line "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("more than ", kMaxJobFileValues, " values")));
  EXPECT_THAT(std::string(status.message()), HasSubstr("job-file expansion limit"));
  EXPECT_LT(seconds, 5.0);  // bounded work: about kMaxJobFileValues nodes, not 387 million
}

TEST(JobFileLimitsTest, ASelfReferencingAliasHitsALimitInsteadOfRecursingForever) {
  for (const char* text : {"name: &a [*a]\n", "name: &a {x: *a}\n"}) {
    absl::Status status = ParseJobSpec(text, JobFileFormat::kYaml).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(JobFileLimitsTest, DeeplyNestedJsonFailsAtTheDepthLimitWithoutCrashing) {
  // Just under the size limit: half a million '[' then as many ']' as the value of a field.
  const int depth = static_cast<int>(kMaxJobFileBytes / 2) - 20;
  const std::string text =
      absl::StrCat("{\n\"name\":\n", std::string(depth, '['), std::string(depth, ']'), "}");
  ASSERT_LE(text.size(), kMaxJobFileBytes);
  absl::Status status;
  const double seconds = SecondsToParse(text, JobFileFormat::kJson, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("line 3: nested deeper than ", kMaxJobFileDepth, " levels")));
  EXPECT_THAT(std::string(status.message()), HasSubstr("job-file depth limit"));
  EXPECT_LT(seconds, 5.0);
}

TEST(JobFileLimitsTest, TheTwoMegabyteNestedJsonOfTheIssueFailsAtTheSizeLimit) {
  const int depth = 1'000'000;
  const std::string text =
      absl::StrCat("{\n\"name\":\n", std::string(depth, '['), std::string(depth, ']'), "}");
  absl::Status status = ParseJobSpec(text, JobFileFormat::kJson).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("line 3: the job file is larger than 1 MiB"));
}

TEST(JobFileLimitsTest, DeeplyNestedYamlFailsAtTheDepthLimit) {
  for (const char* open : {"[", "{a: "}) {
    std::string text = "name:\n  ";
    int depth = 0;
    while (text.size() + std::strlen(open) + 1 < kMaxJobFileBytes / 2) text += open, ++depth;
    text += "x";
    text += std::string(depth, open[0] == '[' ? ']' : '}');
    ASSERT_LE(text.size(), kMaxJobFileBytes);
    absl::Status status;
    const double seconds = SecondsToParse(text, JobFileFormat::kYaml, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << open;
    EXPECT_THAT(std::string(status.message()), HasSubstr("line 2: ")) << open;
    EXPECT_THAT(std::string(status.message()), HasSubstr("job-file depth limit")) << open;
    EXPECT_LT(seconds, 5.0);
  }
}

TEST(JobFileLimitsTest, LongFlatListsAndMapsStopAtTheExpansionLimitWhileParsing) {
  std::string yaml_list = "name: [";
  std::string json_list = "{\"name\": [";
  std::string yaml_map = "name:\n";
  for (int i = 0; i <= kMaxJobFileValues; ++i) {
    yaml_list += "0,";
    json_list += "0,";
    if (i % 2 == 0) absl::StrAppend(&yaml_map, "  k", i, ": 1\n");  // a key and a value
  }
  yaml_list += "0]";
  json_list += "0]}";
  for (const std::string* text : {&yaml_list, &json_list, &yaml_map}) {
    ASSERT_LE(text->size(), kMaxJobFileBytes);
    absl::Status status = ParseJobSpec(*text, JobFileFormat::kAuto).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("job-file expansion limit"));
  }
}

TEST(JobFileLimitsTest, AliasesOfALongStringStopAtTheExpandedTextLimit) {
  std::string text = absl::StrCat("long: &s ", std::string(kMaxJobFileBytes / 2, 'x'), "\nname: [");
  for (int i = 0; i < 40; ++i) text += "*s, ";
  text += "*s]\n";
  absl::Status status = ParseJobSpec(text, JobFileFormat::kYaml).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("line 2: the job file expands to more than 16 MiB of text"));
}

TEST(JobFileLimitsTest, AliasesStillWork) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: &n demo\ntrain: {optimizer: *n}\nschedule: &s {kind: zb-v}\n", JobFileFormat::kYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().optimizer(), "demo");
  EXPECT_EQ(spec->schedule().kind(), "zb-v");
}

TEST(JobFileLimitsTest, NestingUpToTheDepthLimitIsAccepted) {
  // The limit counts containers: the top-level map is depth 1.
  std::string deep = "name: ";
  for (int i = 1; i < kMaxJobFileDepth; ++i) deep += "[";
  deep += "x";
  deep += std::string(kMaxJobFileDepth - 1, ']');
  // Reaches the field mapper (which rejects a list for 'name'), not the depth limit.
  absl::Status status = ParseJobSpec(deep, JobFileFormat::kYaml).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("field 'name' expects a string"));
  absl::StrReplaceAll({{"x", "\"x\""}}, &deep);
  status =
      ParseJobSpec(absl::StrCat("{\"name\": ", deep.substr(6), "}"), JobFileFormat::kJson).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("field 'name' expects a string"));
}

TEST(JobFileLimitsTest, AFileOverTheSizeLimitIsRefusedBeforeParsing) {
  std::string text = "name: big\n";
  while (text.size() <= kMaxJobFileBytes) text += "# padding padding padding padding\n";
  absl::Status status = ParseJobSpec(text, JobFileFormat::kYaml).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("job-file size limit"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("1 MiB"));

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / absl::StrCat("zpipe-big-", getpid(), ".yaml");
  std::ofstream(file) << text;
  absl::StatusOr<v1::JobSpec> spec = LoadJobFile(file.string());
  std::filesystem::remove(file);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(file.string() + ": line "));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("job-file size limit"));
}

}  // namespace
}  // namespace zpipe
