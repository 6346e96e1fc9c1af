// TokenFileDataset windows (content = the file slice, sequential coverage, Rng determinism),
// file checks, and the byte-level tokenizer (library and brrr_tokenize CLI).
#include "data/token_file.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("brrr_tokens_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { brrr::test::remove_tree(dir_); }

  // Token i has value i (+ offset), so a window's first value is its start position.
  template <typename T>
  std::string write_tokens(const std::string& name, int64_t n, T offset = 0) {
    std::vector<T> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<T>(i + offset);
    return write_bytes(
        name, std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  }
  std::string write_bytes(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  fs::path dir_;
};

TEST_F(TokenFileTest, RandomWindowsAreFileSlicesDrawnFromRng) {
  const std::string path = write_tokens<uint16_t>("t.bin", 1000);
  TokenFileDataset data(path, 16, TokenDtype::kUint16, TokenWindows::kRandom);
  EXPECT_EQ(data.size(), 1000 / 16);
  std::set<int64_t> starts;
  for (int64_t i = 0; i < data.size(); ++i) {
    Rng rng(mix_seed(7, 0, static_cast<uint64_t>(i)));
    at::Tensor tokens = data.get(i, rng).at("tokens");
    ASSERT_EQ(tokens.scalar_type(), at::kLong);
    ASSERT_EQ(tokens.sizes(), (std::vector<int64_t>{17}));
    const int64_t start = tokens[0].item<int64_t>();
    ASSERT_LE(start + 17, 1000);
    EXPECT_TRUE(tokens.equal(at::arange(start, start + 17, at::kLong)));
    starts.insert(start);
    Rng again(mix_seed(7, 0, static_cast<uint64_t>(i)));
    EXPECT_TRUE(data.get(i, again).at("tokens").equal(tokens));
  }
  EXPECT_GT(starts.size(), 50u);  // windows really move
}

TEST_F(TokenFileTest, SequentialWindowsCoverTheFileWithoutOverlap) {
  const std::string path = write_tokens<uint16_t>("s.bin", 101);
  TokenFileDataset data(path, 10, TokenDtype::kUint16, TokenWindows::kSequential);
  ASSERT_EQ(data.size(), 10);  // floor((101 - 1) / 10)
  Rng rng(0);
  for (int64_t i = 0; i < data.size(); ++i) {
    at::Tensor tokens = data.get(i, rng).at("tokens");
    EXPECT_TRUE(tokens.equal(at::arange(i * 10, i * 10 + 11, at::kLong))) << i;
  }
  EXPECT_THROW(data.get(10, rng), DataError);
  // One token short of a whole extra window: still 9 windows for 100 tokens.
  TokenFileDataset shorter(write_tokens<uint16_t>("s2.bin", 100), 10, TokenDtype::kUint16,
                           TokenWindows::kSequential);
  EXPECT_EQ(shorter.size(), 9);
}

TEST_F(TokenFileTest, Uint32TokensKeepLargeIds) {
  const std::string path = write_tokens<uint32_t>("big.bin", 64, 100000u);
  TokenFileDataset data(path, 8, TokenDtype::kUint32, TokenWindows::kSequential);
  EXPECT_EQ(data.num_tokens(), 64);
  Rng rng(0);
  EXPECT_EQ(data.get(1, rng).at("tokens")[0].item<int64_t>(), 100008);
}

TEST_F(TokenFileTest, BadFilesThrowNamingThePath) {
  const std::string odd = write_bytes("odd.bin", std::string(11, 'a'));
  try {
    TokenFileDataset(odd, 2, TokenDtype::kUint16, TokenWindows::kRandom);
    ADD_FAILURE() << "no error for odd size";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(odd), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple"), std::string::npos) << e.what();
  }
  const std::string shrt = write_tokens<uint16_t>("short.bin", 8);
  EXPECT_THROW(TokenFileDataset(shrt, 8, TokenDtype::kUint16, TokenWindows::kRandom), DataError);
  EXPECT_NO_THROW(TokenFileDataset(shrt, 7, TokenDtype::kUint16, TokenWindows::kRandom));
  EXPECT_THROW(
      TokenFileDataset((dir_ / "none.bin").string(), 8, TokenDtype::kUint16, TokenWindows::kRandom),
      DataError);
  EXPECT_THROW(parse_token_dtype("int8"), ConfigError);
  EXPECT_THROW(parse_token_windows("strided"), ConfigError);
}

TEST_F(TokenFileTest, ByteTokenizerRoundTripsUtf8Files) {
  const std::string fixture = std::string(BRRR_SOURCE_DIR) + "/tests/data/fixtures/utf8_sample.txt";
  const std::string second = write_bytes("b.txt", "\xC3\xA9t\xC3\xA9 \xE2\x82\xAC\n");
  const std::string expected = read_file_bytes(fixture) + read_file_bytes(second);
  for (TokenDtype dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
    const std::string out = (dir_ / "out.bin").string();
    const int64_t count = write_byte_tokens({fixture, second}, out, dtype);
    ASSERT_EQ(count, static_cast<int64_t>(expected.size()));
    TokenFileDataset data(out, 1, dtype, TokenWindows::kSequential);
    at::Tensor all = data.slice(0, count);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(all[i].item<int64_t>(), static_cast<uint8_t>(expected[i])) << i;
    }
  }
}

TEST_F(TokenFileTest, InvalidUtf8ReportsFileAndByteOffset) {
  const std::string out = (dir_ / "bad_out.bin").string();
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"ab\xC3(", 3},             // continuation expected
      {"x\xC0\xAF", 1},           // overlong lead byte
      {"xy\xE0\x80\x80", 3},      // overlong 3-byte form
      {"\xED\xA0\x80", 1},        // UTF-16 surrogate
      {"ok\xF4\x90\x80\x80", 3},  // above U+10FFFF
      {"\x80", 0},                // stray continuation
      {"abc\xE2\x82", 3},         // cut off by end of file (offset of the sequence)
  };
  for (const auto& [text, offset] : cases) {
    const std::string input = write_bytes("bad.txt", text);
    try {
      write_byte_tokens({input}, out, TokenDtype::kUint16);
      ADD_FAILURE() << "accepted invalid input at " << offset;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(input + ":byte offset " + std::to_string(offset)),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(out));  // no partial output left behind
    EXPECT_EQ(write_byte_tokens({input}, out, TokenDtype::kUint16, /*allow_invalid=*/true),
              static_cast<int64_t>(text.size()));
    fs::remove(out);
  }
}

int run(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(TokenFileTest, CommandLineExitCodes) {
  const std::string exe = BRRR_TOKENIZE_EXE;
  const std::string good = write_bytes("good.txt", "hello, w\xC3\xB6rld\n");
  const std::string bad = write_bytes("bad.txt", "\xFF");
  const std::string out = (dir_ / "cli.bin").string();
  EXPECT_EQ(run(exe + " " + good + " " + good + " -o " + out + " --dtype uint32"), 0);
  EXPECT_EQ(fs::file_size(out), 2u * 14u * 4u);
  EXPECT_EQ(run(exe + " " + bad + " -o " + out), 1);
  EXPECT_EQ(run(exe + " " + bad + " -o " + out + " --allow-invalid"), 0);
  EXPECT_EQ(fs::file_size(out), 2u);
  EXPECT_EQ(run(exe + " " + good), 2);                                 // no -o
  EXPECT_EQ(run(exe + " " + good + " -o " + out + " --dtype u8"), 2);  // bad dtype
  EXPECT_EQ(run(exe + " --frobnicate"), 2);
}

}  // namespace
}  // namespace brrr
