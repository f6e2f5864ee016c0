#include "worker/model/token_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"

namespace zpipe::worker::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A fresh directory for one test's files, removed with them.
class TokenFileTest : public ::testing::Test {
 protected:
  TokenFileTest()
      : dir_(std::filesystem::temp_directory_path() /
             absl::StrCat("zpipe-token-file-", ::getpid(), "-",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TokenFileTest() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string WriteBytes(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // `ids` as little-endian tokens of `width` bytes.
  std::string Write(const std::string& name, const std::vector<int64_t>& ids, int width = 2) {
    std::string bytes;
    for (int64_t id : ids) {
      for (int k = 0; k < width; ++k) bytes.push_back(static_cast<char>((id >> (8 * k)) & 0xff));
    }
    return WriteBytes(name, bytes);
  }

  // Tokens 0, 1, ..., n - 1: window w's inputs are w·L ... w·L + L - 1.
  std::string WriteIota(const std::string& name, int64_t n, int width = 2) {
    std::vector<int64_t> ids(n);
    std::iota(ids.begin(), ids.end(), int64_t{0});
    return Write(name, ids, width);
  }

  std::filesystem::path dir_;
};

// Row `row` of a batch is window w of an iota file: inputs w·L.., targets one later.
void ExpectRowIsWindow(const TokenBatch& batch, int row, int64_t w, int64_t offset = 0) {
  const int64_t L = batch.tokens.size(1);
  const torch::Tensor expected = torch::arange(w * L, w * L + L, torch::kLong) + offset;
  EXPECT_TRUE(torch::equal(batch.tokens[row], expected)) << "row " << row << " window " << w;
  EXPECT_TRUE(torch::equal(batch.targets[row], expected + 1)) << "row " << row << " window " << w;
}

TEST_F(TokenFileTest, WindowsFollowTheContractAndWrapModN) {
  // 23 tokens, L = 4: N = floor(22 / 4) = 5 windows.
  const std::string path = WriteIota("train.bin", 23);
  auto data = TokenFileData::Make({.path = path,
                                   .dtype = "uint16",
                                   .seq_len = 4,
                                   .data_size = 2,
                                   .microbatches = 3,
                                   .microbatch_size = 2});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->windows(), 5);

  // t = 1, r = 1, i = 2, j = 1: g = ((1·2 + 1)·3 + 2)·2 + 1 = 23, window 23 mod 5 = 3.
  const TokenBatch b = (*data)->Microbatch(1, 1, 2);
  ASSERT_EQ(b.tokens.sizes(), torch::IntArrayRef({2, 4}));
  EXPECT_EQ(b.tokens.scalar_type(), torch::kLong);
  EXPECT_EQ(b.targets.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.tokens[1], torch::tensor({12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.targets[1], torch::tensor({13, 14, 15, 16}, torch::kLong)));
  EXPECT_EQ((*data)->Window(1, 1, 2, 1), 3);

  for (int64_t t = 0; t < 3; ++t) {
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 3; ++i) {
        const TokenBatch mb = (*data)->Microbatch(t, r, i);
        for (int j = 0; j < 2; ++j) ExpectRowIsWindow(mb, j, (((t * 2 + r) * 3 + i) * 2 + j) % 5);
      }
    }
  }
}

TEST_F(TokenFileTest, TheLastWindowEndsAtTheLastToken) {
  // 21 tokens, L = 4: N = 5, and window 4 is tokens [16, 21): targets end with token 20.
  auto data = TokenFileData::Make(
      {.path = WriteIota("train.bin", 21), .dtype = "uint16", .seq_len = 4, .microbatch_size = 5});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)->windows(), 5);
  const TokenBatch b = (*data)->Microbatch(0, 0, 0);
  ExpectRowIsWindow(b, 4, 4);
  EXPECT_EQ(b.targets[4][3].item<int64_t>(), 20);
}

TEST_F(TokenFileTest, ReadsLittleEndianUint16AndUint32) {
  // Bytes written by hand: uint16 0x0201 = 513, 0xfffe = 65534; uint32 0x04030201, 0x000186a0.
  auto u16 = TokenFile::Open(WriteBytes("u16.bin", std::string("\x01\x02\xfe\xff", 4)), "uint16");
  ASSERT_TRUE(u16.ok()) << u16.status();
  int64_t out[2];
  u16->Read(0, 2, out);
  EXPECT_EQ(out[0], 513);
  EXPECT_EQ(out[1], 65534);
  auto u32 = TokenFile::Open(
      WriteBytes("u32.bin", std::string("\x01\x02\x03\x04\xa0\x86\x01\x00", 8)), "uint32");
  ASSERT_TRUE(u32.ok()) << u32.status();
  EXPECT_EQ(u32->size(), 2);
  u32->Read(0, 2, out);
  EXPECT_EQ(out[0], 0x04030201);
  EXPECT_EQ(out[1], 100000);
}

TEST_F(TokenFileTest, Uint32FileBatches) {
  // Ids past uint16's range: token k is 70000 + k.
  std::vector<int64_t> ids(41);
  std::iota(ids.begin(), ids.end(), int64_t{70000});
  auto data = TokenFileData::Make({.path = Write("train.bin", ids, 4),
                                   .dtype = "uint32",
                                   .seq_len = 4,
                                   .data_size = 1,
                                   .microbatches = 2,
                                   .microbatch_size = 3});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->windows(), 10);
  // t = 2, i = 1: g = (2·2 + 1)·3 + j = 15 + j, windows 5, 6, 7.
  const TokenBatch b = (*data)->Microbatch(2, 0, 1);
  for (int j = 0; j < 3; ++j) ExpectRowIsWindow(b, j, 5 + j, 70000);
}

TEST(ShufflePermutationTest, GoldenValuesSharedWithPython) {
  // python/tests/test_zeropipe.py asserts the same values.
  EXPECT_EQ(ShufflePermutation(42, 0, 10), (std::vector<int64_t>{2, 8, 9, 7, 1, 4, 6, 0, 5, 3}));
  EXPECT_EQ(ShufflePermutation(42, 1, 10), (std::vector<int64_t>{3, 1, 6, 8, 4, 5, 9, 7, 2, 0}));
  EXPECT_EQ(ShufflePermutation(0, 0, 10), (std::vector<int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(ShufflePermutation(7, 0, 1), (std::vector<int64_t>{0}));
  EXPECT_TRUE(ShufflePermutation(7, 0, 0).empty());
}

TEST(ShufflePermutationTest, EachPassIsADifferentPermutationAndDeterministic) {
  constexpr int64_t kN = 1000;
  std::vector<int64_t> iota(kN);
  std::iota(iota.begin(), iota.end(), int64_t{0});
  std::set<std::vector<int64_t>> seen;
  for (uint64_t pass = 0; pass < 5; ++pass) {
    std::vector<int64_t> perm = ShufflePermutation(3, pass, kN);
    EXPECT_EQ(perm, ShufflePermutation(3, pass, kN));
    EXPECT_NE(perm, iota);
    seen.insert(perm);
    std::sort(perm.begin(), perm.end());
    EXPECT_EQ(perm, iota) << "pass " << pass;
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_NE(ShufflePermutation(3, 0, kN), ShufflePermutation(4, 0, kN));
}

TEST_F(TokenFileTest, ShuffledDataReadsEveryWindowOncePerPass) {
  // 41 tokens, L = 4: N = 10. d·m·b = 2·2·3 = 12 samples per iteration; 5 iterations = 6 passes.
  const TokenFileData::Options options{.path = WriteIota("train.bin", 41),
                                       .dtype = "uint16",
                                       .seq_len = 4,
                                       .data_size = 2,
                                       .microbatches = 2,
                                       .microbatch_size = 3,
                                       .shuffle_seed = 42};
  auto data = TokenFileData::Make(options);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int64_t> order;  // windows in global sample order g
  for (int64_t t = 0; t < 5; ++t) {
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 2; ++i) {
        const TokenBatch b = (*data)->Microbatch(t, r, i);
        for (int j = 0; j < 3; ++j) {
          const int64_t w = (*data)->Window(t, r, i, j);
          ExpectRowIsWindow(b, j, w);
          order.push_back(w);
        }
      }
    }
  }
  for (uint64_t pass = 0; pass < 6; ++pass) {
    const std::vector<int64_t> got(order.begin() + pass * 10, order.begin() + pass * 10 + 10);
    EXPECT_EQ(got, ShufflePermutation(42, pass, 10)) << "pass " << pass;
  }
  // Golden, asserted by the Python test too: t = 1, r = 1, i = 1 reads g = 21, 22, 23 (pass 2,
  // positions 1..3), windows 1, 4, 6.
  const TokenBatch b = (*data)->Microbatch(1, 1, 1);
  EXPECT_TRUE(torch::equal(
      b.tokens, torch::tensor({{4, 5, 6, 7}, {16, 17, 18, 19}, {24, 25, 26, 27}}, torch::kLong)));

  // Deterministic across instances, whatever order microbatches are asked in.
  auto again = TokenFileData::Make(options);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(
      torch::equal((*again)->Microbatch(4, 1, 0).tokens, (*data)->Microbatch(4, 1, 0).tokens));
  EXPECT_TRUE(
      torch::equal((*again)->Microbatch(0, 0, 1).tokens, (*data)->Microbatch(0, 0, 1).tokens));
  // Another seed, another order.
  TokenFileData::Options other = options;
  other.shuffle_seed = 43;
  auto reseeded = TokenFileData::Make(other);
  ASSERT_TRUE(reseeded.ok());
  bool differs = false;
  for (int64_t t = 0; t < 5; ++t) {
    differs |=
        !torch::equal((*reseeded)->Microbatch(t, 0, 0).tokens, (*data)->Microbatch(t, 0, 0).tokens);
  }
  EXPECT_TRUE(differs);
}

TEST_F(TokenFileTest, ConcurrentReadersAgreeWithOneReader) {
  // Threads alternate between passes, so the permutation cache is hit, missed and evicted.
  const TokenFileData::Options options{.path = WriteIota("train.bin", 401),
                                       .dtype = "uint16",
                                       .seq_len = 4,
                                       .data_size = 1,
                                       .microbatches = 1,
                                       .microbatch_size = 7,
                                       .shuffle_seed = 9};
  auto shared = TokenFileData::Make(options);
  auto reference = TokenFileData::Make(options);
  ASSERT_TRUE(shared.ok() && reference.ok());
  const TokenData& data = **shared;  // through the interface the executor holds
  std::vector<std::thread> threads;
  std::vector<int> mismatches(3, 0);
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      for (int64_t n = 0; n < 60; ++n) {
        const int64_t t = (n * (k + 5)) % 60;
        if (!torch::equal(data.Microbatch(t, 0, 0).tokens,
                          (*reference)->Microbatch(t, 0, 0).tokens)) {
          ++mismatches[k];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(3, 0));
}

TEST_F(TokenFileTest, EvalBatchesAreFixedWindowsWrappingModN) {
  // 23 tokens, L = 4: N_eval = 5; b = 2: batch k row j is window (2k + j) mod 5.
  auto eval = TokenFileEval::Make(WriteIota("val.bin", 23), "uint16", 4, 2, 4);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->batches(), 4);
  EXPECT_EQ(eval->windows(), 5);
  for (int k = 0; k < 4; ++k) {
    const TokenBatch b = eval->Batch(k);
    ASSERT_EQ(b.tokens.sizes(), torch::IntArrayRef({2, 4}));
    for (int j = 0; j < 2; ++j) ExpectRowIsWindow(b, j, (2 * k + j) % 5);
    EXPECT_TRUE(torch::equal(b.tokens, eval->Batch(k).tokens));
  }
  ExpectRowIsWindow(eval->Batch(2), 1, 0);  // the wrap
}

TEST_F(TokenFileTest, ErrorsNameTheFile) {
  const std::string missing = (dir_ / "missing.bin").string();
  const auto open = [](const std::string& path, const std::string& dtype) {
    return TokenFile::Open(path, dtype).status();
  };
  EXPECT_EQ(open(missing, "uint16").code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(open(missing, "uint16").message(), HasSubstr(missing));

  const absl::Status directory = open(dir_.string(), "uint16");
  EXPECT_EQ(directory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.message(), HasSubstr(dir_.string()));

  const std::string odd = WriteBytes("odd.bin", "abc");
  EXPECT_EQ(open(odd, "uint16").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(open(odd, "uint16").message(), AllOf(HasSubstr(odd), HasSubstr("multiple of 2")));
  const std::string six = WriteBytes("six.bin", "abcdef");
  EXPECT_TRUE(TokenFile::Open(six, "uint16").ok());
  EXPECT_THAT(open(six, "uint32").message(), AllOf(HasSubstr(six), HasSubstr("multiple of 4")));

  const std::string ok = WriteIota("ok.bin", 100);
  EXPECT_EQ(open(ok, "int8").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(open(ok, "int8").message(), AllOf(HasSubstr(ok), HasSubstr("int8")));

  // 4 tokens, L = 4: no window (one needs 5 tokens); an empty file neither.
  const std::string short_file = WriteIota("short.bin", 4);
  const std::string empty = WriteBytes("empty.bin", "");
  for (const std::string& path : {short_file, empty}) {
    auto data = TokenFileData::Make({.path = path, .dtype = "uint16", .seq_len = 4});
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(data.status().message(), AllOf(HasSubstr(path), HasSubstr("one window")));
    auto eval = TokenFileEval::Make(path, "uint16", 4, 1, 1);
    EXPECT_THAT(eval.status().message(), AllOf(HasSubstr(path), HasSubstr("one window")));
  }
  EXPECT_TRUE(
      TokenFileData::Make({.path = WriteIota("five.bin", 5), .dtype = "uint16", .seq_len = 4})
          .ok());

  // Errors of Open and bad sizes come through Make, still naming the file.
  EXPECT_EQ(TokenFileData::Make({.path = missing, .dtype = "uint16", .seq_len = 4}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(TokenFileData::Make({.path = ok, .dtype = "uint8", .seq_len = 4}).status().message(),
              HasSubstr(ok));
  EXPECT_THAT(TokenFileData::Make({.path = ok, .dtype = "uint16", .seq_len = 4, .data_size = 0})
                  .status()
                  .message(),
              AllOf(HasSubstr(ok), HasSubstr("data_size")));
  EXPECT_THAT(TokenFileEval::Make(ok, "uint16", 4, 2, 0).status().message(),
              AllOf(HasSubstr(ok), HasSubstr("batches")));
}

TEST_F(TokenFileTest, ValidateVocabNamesTheFirstBadToken) {
  const std::string path = Write("train.bin", {1, 2, 3, 70, 4, 99, 5});
  auto file = TokenFile::Open(path, "uint16");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->ValidateVocab(100).ok());
  const absl::Status bad = file->ValidateVocab(50);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(),
              AllOf(HasSubstr(path), HasSubstr("token 3 "), HasSubstr("byte offset 6"),
                    HasSubstr("is 70"), HasSubstr("vocab 50")));
  // uint32 offsets count 4 bytes per token; the boundary id == vocab is out.
  auto wide = TokenFile::Open(Write("wide.bin", {0, 100000, 100001}, 4), "uint32");
  ASSERT_TRUE(wide.ok());
  EXPECT_TRUE(wide->ValidateVocab(100002).ok());
  EXPECT_THAT(wide->ValidateVocab(100001).message(),
              AllOf(HasSubstr("token 2 "), HasSubstr("byte offset 8"), HasSubstr("is 100001")));
}

TEST_F(TokenFileTest, MovedFileKeepsItsMapping) {
  auto file = TokenFile::Open(WriteIota("train.bin", 9), "uint16");
  ASSERT_TRUE(file.ok());
  TokenFile moved = *std::move(file);
  auto assigned = TokenFile::Open(WriteIota("other.bin", 3), "uint16");
  ASSERT_TRUE(assigned.ok());
  *assigned = std::move(moved);  // unmaps other.bin, takes over train.bin
  int64_t out[3];
  assigned->Read(6, 3, out);
  EXPECT_EQ(out[0], 6);
  EXPECT_EQ(out[2], 8);
  EXPECT_EQ(assigned->Windows(4), 2);
  EXPECT_THAT(assigned->path(), HasSubstr("train.bin"));
}

}  // namespace
}  // namespace zpipe::worker::model
