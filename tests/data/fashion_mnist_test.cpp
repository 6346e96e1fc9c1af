// IDX parsing (plain and gzip, bad magic, truncation), the real Fashion-MNIST files when installed,
// and the PNG export used by image_folder.
#include "data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRealData = "/usr/share/datasets/fashion-mnist";

std::string idx_bytes(const std::vector<int32_t>& dims, const at::Tensor& data, uint8_t ndim_byte) {
  std::string out = {0, 0, 0x08, static_cast<char>(ndim_byte)};
  for (int32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((d >> shift) & 0xFF));
  }
  out.append(reinterpret_cast<const char*>(data.data_ptr<uint8_t>()), data.numel());
  return out;
}

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("brrr_idx_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    images_ = at::randint(0, 256, {12, 28, 28}, at::kByte);
    labels_ = at::arange(12, at::kLong).remainder(10).to(at::kByte);
  }
  void TearDown() override { brrr::test::remove_tree(dir_); }

  void write_plain(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  void write_gz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
  }
  // Images plain, labels gzipped: both code paths in one split.
  void write_split(const std::string& prefix) {
    write_plain(prefix + "-images-idx3-ubyte", idx_bytes({12, 28, 28}, images_, 3));
    write_gz(prefix + "-labels-idx1-ubyte.gz", idx_bytes({12}, labels_, 1));
  }

  fs::path dir_;
  at::Tensor images_, labels_;
};

TEST_F(FashionMnistTest, ReadsPlainAndGzippedIdx) {
  write_split("train");
  FashionMnistDataset data(dir_.string(), "train");
  ASSERT_EQ(data.size(), 12);
  EXPECT_TRUE(data.images().equal(images_));
  EXPECT_TRUE(data.labels().equal(labels_.to(at::kLong)));
  Rng rng(0);
  Sample s = data.get(11, rng);
  EXPECT_EQ(s.at("image").sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_TRUE(s.at("image")[0].equal(images_[11]));
  EXPECT_EQ(s.at("label").item<int64_t>(), 1);
  EXPECT_THROW(FashionMnistDataset(dir_.string(), "test"), DataError);  // no t10k files
  EXPECT_THROW(FashionMnistDataset(dir_.string(), "validation"), ConfigError);
}

TEST_F(FashionMnistTest, BadMagicAndTruncationNameTheFile) {
  write_plain("bad-magic", idx_bytes({12, 28, 28}, images_, 4));
  try {
    read_idx_ubyte((dir_ / "bad-magic").string(), 3);
    ADD_FAILURE() << "bad magic accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-magic"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("magic number 0x00000804"), std::string::npos) << e.what();
  }
  const std::string full = idx_bytes({12, 28, 28}, images_, 3);
  write_gz("short.gz", full.substr(0, full.size() - 100));
  try {
    read_idx_ubyte((dir_ / "short.gz").string(), 3);
    ADD_FAILURE() << "truncated file accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("short.gz' is truncated"), std::string::npos) << e.what();
  }
  write_plain("long", full + "x");
  EXPECT_THROW(read_idx_ubyte((dir_ / "long").string(), 3), DataError);
}

TEST_F(FashionMnistTest, TransformsApplyWithPadding) {
  write_split("t10k");
  TransformOptions crop;
  crop.name = "random_crop";
  crop.size = {28};
  crop.padding = 2;
  FashionMnistDataset data(dir_.string(), "test", {crop});
  Rng a(5), b(5);
  at::Tensor x = data.get(3, a).at("image");
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_TRUE(x.equal(data.get(3, b).at("image")));
}

TEST_F(FashionMnistTest, ExportsPngFolderByClass) {
  write_split("train");
  const fs::path out = dir_ / "png";
  export_fashion_mnist_png(dir_.string(), "train", out.string(), 11);
  const auto& names = FashionMnistDataset::class_names();
  ASSERT_EQ(names.size(), 10u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));  // folder order == label order
  int64_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(out)) files += entry.is_regular_file();
  EXPECT_EQ(files, 11);
  // Image 10 has label 0; image 3 has label 3.
  EXPECT_TRUE(decode_image_file((out / names[0] / "00010.png").string())[0].equal(images_[10]));
  EXPECT_TRUE(decode_image_file((out / names[3] / "00003.png").string())[0].equal(images_[3]));
}

TEST(FashionMnistRealTest, InstalledDataHasKnownCountsAndFirstLabel) {
  if (!fs::exists(kRealData)) GTEST_SKIP() << kRealData << " not installed";
  FashionMnistDataset train(kRealData, "train");
  FashionMnistDataset test(kRealData, "test");
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  Rng rng(0);
  EXPECT_EQ(train.get(0, rng).at("label").item<int64_t>(), 9);  // ankle boot
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{60000, 28, 28}));
  // Balanced classes: 6000 per class in train.
  EXPECT_TRUE(at::bincount(train.labels()).equal(at::full({10}, 6000, at::kLong)));
}

}  // namespace
}  // namespace brrr
