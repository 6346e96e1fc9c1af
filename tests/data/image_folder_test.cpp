// ImageFolderDataset over a folder built from the golden images of tests/golden/gen_images.py.
#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

TransformOptions op(const std::string& name, std::vector<int64_t> size) {
  TransformOptions o;
  o.name = name;
  o.size = std::move(size);
  return o;
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("brrr_folder_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "b_cat" / "nested");
    fs::create_directories(root_ / "a_dog");
    const fs::path golden = fs::path(BRRR_GOLDEN_DIR) / "images";
    fs::copy_file(golden / "large420.jpg", root_ / "a_dog" / "x.JPG");
    fs::copy_file(golden / "gray8.png", root_ / "a_dog" / "w.png");
    fs::copy_file(golden / "rgb420.jpg", root_ / "b_cat" / "z.jpeg");
    fs::copy_file(golden / "rgba8.png", root_ / "b_cat" / "nested" / "a.Png");
    std::ofstream(root_ / "b_cat" / "notes.txt") << "not an image";
  }
  void TearDown() override { brrr::test::remove_tree(root_); }
  fs::path root_;
};

TEST_F(ImageFolderTest, ClassesSortedFilesSortedLabelsAssigned) {
  ImageFolderDataset data(root_.string(), {op("resize", {20, 24})});
  EXPECT_EQ(data.classes(), (std::vector<std::string>{"a_dog", "b_cat"}));
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(fs::path(data.file(0)).filename(), "w.png");
  EXPECT_EQ(fs::path(data.file(1)).filename(), "x.JPG");
  EXPECT_EQ(fs::path(data.file(2)).filename(), "a.Png");  // "nested/a.Png" < "z.jpeg"
  EXPECT_EQ(fs::path(data.file(3)).filename(), "z.jpeg");
  Rng rng(0);
  for (int64_t i = 0; i < 4; ++i) {
    Sample s = data.get(i, rng);
    EXPECT_EQ(s.at("image").sizes(), (std::vector<int64_t>{3, 20, 24})) << i;
    EXPECT_EQ(s.at("image").scalar_type(), at::kByte);
    EXPECT_TRUE(s.at("image").is_contiguous());
    EXPECT_EQ(s.at("label").item<int64_t>(), i < 2 ? 0 : 1);
  }
  at::Tensor gray = data.get(0, rng).at("image");  // gray PNG expanded to RGB
  EXPECT_TRUE(gray[0].equal(gray[1]) && gray[1].equal(gray[2]));
}

TEST_F(ImageFolderTest, SameSeedSameSampleAndRegionPathIsFaithful) {
  const std::vector<TransformOptions> t = {op("random_resized_crop", {32}),
                                           op("horizontal_flip", {})};
  ImageFolderDataset fast(root_.string(), t, /*region_decode=*/true);
  ImageFolderDataset full(root_.string(), t, /*region_decode=*/false);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    Rng a(seed), b(seed), c(seed);
    at::Tensor x = fast.get(1, a).at("image");
    EXPECT_TRUE(x.equal(fast.get(1, b).at("image")));
    // Same rectangle and flip, reduced-scale decode: a few levels apart on average at most.
    at::Tensor y = full.get(1, c).at("image");
    EXPECT_LT((x.to(at::kFloat) - y.to(at::kFloat)).abs().mean().item<float>(), 3.0f) << seed;
  }
}

TEST_F(ImageFolderTest, CorruptFileErrorNamesThePath) {
  const fs::path bad = root_ / "b_cat" / "zz_broken.jpg";
  std::string bytes = read_file_bytes((root_ / "b_cat" / "z.jpeg").string());
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  ImageFolderDataset data(root_.string(), {op("center_crop", {16})});
  ASSERT_EQ(data.file(4), bad.string());
  Rng rng(0);
  try {
    data.get(4, rng);
    ADD_FAILURE() << "corrupt file decoded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
  }
}

TEST_F(ImageFolderTest, ConstructionErrors) {
  try {
    ImageFolderDataset(root_.string(), {op("horizontal_flip", {})});
    ADD_FAILURE() << "no fixed size accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.transforms"), std::string::npos) << e.what();
  }
  const fs::path empty = root_ / "a_dog" / "empty_root";
  fs::create_directories(empty);
  try {
    ImageFolderDataset(empty.string(), {op("resize", {8})});
    ADD_FAILURE() << "empty folder accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(empty.string()), std::string::npos) << e.what();
  }
  fs::create_directories(empty / "class_without_images");
  EXPECT_THROW(ImageFolderDataset(empty.string(), {op("resize", {8})}), DataError);
  EXPECT_THROW(ImageFolderDataset((root_ / "missing").string(), {op("resize", {8})}), DataError);
}

}  // namespace
}  // namespace brrr
