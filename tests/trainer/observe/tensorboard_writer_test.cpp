// TensorBoardWriter: files are read back by the real `tensorboard` package (tests/trainer/
// read_tb_events.py), so both the TFRecord framing/CRCs and the protobuf encoding are checked
// against an independent implementation.
#include "trainer/observe/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/crc32c.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("brrr_tb_{}_{}", name, getpid());
  brrr::test::remove_tree(dir);
  fs::create_directories(dir);
  brrr::test::remove_at_exit(dir);
  return dir;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[pos + i]);
  return v;
}

TEST(TensorBoardWriterTest, ScalarsReadBackByTensorBoard) {
  if (!test::python_imports("tensorboard"))
    GTEST_SKIP() << "python `tensorboard` package not importable";
  const fs::path dir = fresh_dir("readback");
  // (prefix, step, name, value); steps include a multi-byte varint beyond 2^32.
  const std::vector<std::tuple<std::string, int64_t, std::string, double>> written = {
      {"train", 10, "loss", 2.302585092994046},
      {"train", 10, "lr", 3e-4},
      {"train", 20, "loss", 1.0e-8},
      {"eval", 20, "val_loss", -0.125},
      {"train", int64_t{1} << 40, "loss", 123456.789}};
  {
    TensorBoardWriter writer(dir.string());
    EXPECT_EQ(fs::path(writer.path()).parent_path(), dir);
    EXPECT_EQ(fs::path(writer.path()).filename().string().rfind("events.out.tfevents.", 0), 0u);
    writer.add_scalars(10, {{"loss", 2.302585092994046}, {"lr", 3e-4}}, "train");
    writer.add_scalars(20, {{"loss", 1.0e-8}}, "train");
    writer.add_scalars(20, {{"val_loss", -0.125}}, "eval");
    writer.add_scalars(int64_t{1} << 40, {{"loss", 123456.789}}, "train");
    writer.add_text(0, "config", "    run: {name: x}\n    seed: 1");
  }  // destruction flushes

  int status = 0;
  const std::string out =
      test::run_source_script("tests/trainer/observe/read_tb_events.py", dir.string(), &status);
  ASSERT_EQ(status, 0) << out;

  std::istringstream lines(out);
  std::string line;
  std::vector<std::tuple<std::string, int64_t, double>> scalars;
  int records = -1;
  std::string version;
  std::vector<std::string> texts;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string kind;
    std::getline(fields, kind, '\t');
    if (kind == "records") {
      std::string file;
      std::getline(fields, file, '\t');
      fields >> records;
    } else if (kind == "file_version") {
      fields >> version;
    } else if (kind == "scalar") {
      std::string tag;
      int64_t step;
      double value;
      std::getline(fields, tag, '\t');
      fields >> step >> value;
      scalars.emplace_back(tag, step, value);
    } else if (kind == "text") {
      texts.push_back(line);
    }
  }
  EXPECT_EQ(records, 6) << out;  // header + 5 events, every CRC verified by the reader
  // The text plugin's record, read back through TensorBoard's tensor path.
  EXPECT_EQ(texts,
            std::vector<std::string>{"text\tconfig\t0\ttext\t'    run: {name: x}\\n    seed: 1'"})
      << out;
  EXPECT_EQ(version, "2.0") << out;  // EventAccumulator parses "brain.Event:2" to 2.0
  ASSERT_EQ(scalars.size(), written.size()) << out;
  for (const auto& [prefix, step, name, value] : written) {
    const std::string tag = prefix + "/" + name;
    bool found = false;
    for (const auto& [t, s, v] : scalars) {
      if (t == tag && s == step) {
        found = true;
        // Stored as float32: the value read back is exactly the float nearest to what was written.
        EXPECT_EQ(v, static_cast<double>(static_cast<float>(value))) << tag << " @ " << step;
      }
    }
    EXPECT_TRUE(found) << tag << " @ " << step << " missing in:\n" << out;
  }
}

TEST(TensorBoardWriterTest, RecordsAreFramedWithMaskedCrcs) {
  const fs::path dir = fresh_dir("framing");
  std::string path;
  {
    TensorBoardWriter writer(dir.string());
    path = writer.path();
    for (int i = 1; i <= 3; ++i) writer.add_scalars(i, {{"loss", 1.0 / i}}, "train");
  }
  const std::string bytes = read_bytes(path);
  size_t pos = 0;
  int count = 0;
  while (pos < bytes.size()) {
    ASSERT_LE(pos + 12, bytes.size()) << "truncated header at byte " << pos;
    const uint64_t len = le(bytes, pos, 8);
    EXPECT_EQ(le(bytes, pos + 8, 4), crc32c_mask(crc32c(bytes.data() + pos, 8)));
    ASSERT_LE(pos + 12 + len + 4, bytes.size()) << "truncated record at byte " << pos;
    const std::string data = bytes.substr(pos + 12, len);
    EXPECT_EQ(le(bytes, pos + 12 + len, 4), crc32c_mask(crc32c(data)));
    if (count == 0) {
      EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
    } else {
      EXPECT_NE(data.find("train/loss"), std::string::npos);
    }
    pos += 12 + len + 4;
    ++count;
  }
  EXPECT_EQ(count, 4);
}

TEST(TensorBoardWriterTest, RecordsReachTheFileOnFlushNotBefore) {
  const fs::path dir = fresh_dir("flush");
  TensorBoardWriter writer(dir.string(), TensorBoardWriterOptions{/*flush_secs=*/3600.0});
  const auto header_size = fs::file_size(writer.path());
  EXPECT_GT(header_size, 0u);  // the header is flushed at once: a reader sees a valid file
  writer.add_scalars(1, {{"loss", 0.5}}, "train");
  EXPECT_EQ(fs::file_size(writer.path()), header_size);  // buffered, interval not reached
  writer.flush();
  EXPECT_GT(fs::file_size(writer.path()), header_size);

  TensorBoardWriter eager(fresh_dir("flush_eager").string(), TensorBoardWriterOptions{0.0});
  const auto eager_header = fs::file_size(eager.path());
  eager.add_scalars(1, {{"loss", 0.5}}, "train");
  EXPECT_GT(fs::file_size(eager.path()), eager_header);  // flush_secs 0: every record at once
}

TEST(TensorBoardWriterTest, UnwritableDirectoryThrowsNamingIt) {
  const fs::path file = fresh_dir("unwritable") / "a_file";
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter writer((file / "sub").string());
    FAIL() << "expected an exception";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find((file / "sub").string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brrr
