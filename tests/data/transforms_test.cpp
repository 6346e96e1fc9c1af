// Transforms: bilinear resize against PyTorch (golden from tests/golden/gen_images.py), torchvision
// crop geometry, flips, determinism from the Rng.
#include "data/transforms.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>

#include "core/error.h"

namespace brrr {
namespace {

c10::Dict<c10::IValue, c10::IValue> expected() {
  const std::string path =
      (std::filesystem::path(BRRR_GOLDEN_DIR) / "images" / "expected.pt").string();
  const std::string bytes = read_file_bytes(path);
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
}

TransformOptions op(const std::string& name, std::vector<int64_t> size = {}) {
  TransformOptions o;
  o.name = name;
  o.size = std::move(size);
  return o;
}

at::Tensor test_image(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(0, 256, {c, h, w}, gen, at::kByte);
}

TEST(TransformsTest, ResizeMatchesPyTorchBilinearWithinOne) {
  auto dict = expected();
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE(k);
    at::Tensor in = dict.at("resize_in_" + std::to_string(k)).toTensor();
    at::Tensor want = dict.at("resize_out_" + std::to_string(k)).toTensor();  // float (C, h, w)
    at::Tensor got = resize_bilinear(in, want.size(1), want.size(2));
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LE((got.to(at::kFloat) - want).abs().max().item<float>(), 1.0f);
    // Rounding to nearest: most pixels are exact after rounding PyTorch's float result.
    EXPECT_GT(got.eq(want.round().to(at::kByte)).to(at::kFloat).mean().item<float>(), 0.99f);
  }
}

TEST(TransformsTest, CropResizeEqualsCropThenResize) {
  at::Tensor img = test_image(3, 50, 70, 1);
  const CropRect rect{7, 11, 23, 41};
  at::Tensor crop = img.slice(1, 7, 30).slice(2, 11, 52).contiguous();
  EXPECT_TRUE(crop_resize_bilinear(img, rect, 19, 13).equal(resize_bilinear(crop, 19, 13)));
  EXPECT_TRUE(crop_resize_bilinear(img, rect, 60, 90).equal(resize_bilinear(crop, 60, 90)));
  EXPECT_TRUE(resize_bilinear(img, 50, 70).equal(img));  // identity size is exact
}

TEST(TransformsTest, SameSeedSameOutputDifferentSeedsDiffer) {
  TransformPipeline pipeline({op("random_resized_crop", {32}), op("horizontal_flip")});
  at::Tensor img = test_image(3, 80, 100, 2);
  Rng a(42), b(42), c(43);
  at::Tensor out_a = pipeline.apply(img, a);
  EXPECT_EQ(out_a.sizes(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_TRUE(out_a.is_contiguous());
  EXPECT_TRUE(out_a.equal(pipeline.apply(img, b)));
  EXPECT_FALSE(out_a.equal(pipeline.apply(img, c)));
}

TEST(TransformsTest, HorizontalFlipIsExactMirror) {
  at::Tensor img = test_image(3, 5, 7, 3);
  TransformOptions always = op("horizontal_flip");
  always.p = 1.0;
  TransformOptions never = op("horizontal_flip");
  never.p = 0.0;
  Rng rng(1);
  at::Tensor flipped = TransformPipeline({always}).apply(img, rng);
  for (int64_t x = 0; x < 7; ++x) EXPECT_TRUE(flipped.select(2, x).equal(img.select(2, 6 - x)));
  EXPECT_TRUE(TransformPipeline({never}).apply(img, rng).equal(img));
  EXPECT_TRUE(TransformPipeline({always, always}).apply(img, rng).equal(img));
}

TEST(TransformsTest, ACropLargerThanTheImageItReceivesIsAConfigErrorNamingTheKey) {
  auto op = [](const char* name, int64_t side, int64_t padding = 0) {
    TransformOptions t;
    t.name = name;
    t.size = {side};
    t.padding = padding;
    return t;
  };
  TransformPipeline({op("random_crop", 28, 0)}, "data.transforms").check_fits(28, 28);
  TransformPipeline({op("random_crop", 32, 2)}, "data.transforms").check_fits(28, 28);
  TransformPipeline({op("resize", 64), op("random_crop", 56)}, "data.transforms")
      .check_fits(28, 28);
  try {
    TransformPipeline({op("center_crop", 24), op("random_crop", 26, 0)}, "data.val.transforms")
        .check_fits(28, 28);
    ADD_FAILURE() << "a 26x26 crop of a 24x24 image passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.val.transforms[1].size");
    EXPECT_NE(std::string(e.what()).find("random_crop 26x26 is larger than the 24x24 image"),
              std::string::npos)
        << e.what();
  }
}

TEST(TransformsTest, RandomCropWithPaddingIsAWindowOfThePaddedImage) {
  at::Tensor img = test_image(1, 28, 28, 4) | 1;  // no zeros inside, so padding is recognisable
  TransformOptions crop = op("random_crop", {28});
  crop.padding = 2;
  TransformPipeline pipeline({crop});
  at::Tensor padded = at::constant_pad_nd(img, {2, 2, 2, 2}, 0);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Rng rng(seed);
    at::Tensor out = pipeline.apply(img, rng);
    ASSERT_EQ(out.sizes(), img.sizes());
    bool found = false;
    for (int64_t i = 0; i <= 4 && !found; ++i) {
      for (int64_t j = 0; j <= 4 && !found; ++j) {
        if (out.equal(padded.slice(1, i, i + 28).slice(2, j, j + 28))) {
          offsets.insert({i, j});
          found = true;
        }
      }
    }
    EXPECT_TRUE(found) << "seed " << seed;
  }
  EXPECT_GT(offsets.size(), 8u);  // offsets really vary
}

TEST(TransformsTest, RandomResizedCropRectStaysInsideAndInRange) {
  const std::vector<double> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  for (uint64_t seed = 0; seed < 500; ++seed) {
    Rng rng(seed);
    CropRect r = random_resized_crop_rect(120, 200, scale, ratio, rng);
    ASSERT_GE(r.top, 0);
    ASSERT_GE(r.left, 0);
    ASSERT_LE(r.top + r.height, 120);
    ASSERT_LE(r.left + r.width, 200);
    const double area = static_cast<double>(r.height * r.width) / (120.0 * 200.0);
    EXPECT_GE(area, 0.07);
    const double aspect = static_cast<double>(r.width) / static_cast<double>(r.height);
    EXPECT_GE(aspect, 0.70);
    EXPECT_LE(aspect, 1.40);
  }
}

TEST(TransformsTest, RandomResizedCropFallsBackToCenteredRatioClamp) {
  Rng rng(3);
  // Area scale > 1 can never fit: torchvision's fallback keeps the full height of this wide image
  // and the widest allowed aspect ratio, centred.
  CropRect r = random_resized_crop_rect(100, 400, {2.0, 3.0}, {0.75, 4.0 / 3.0}, rng);
  EXPECT_EQ(r.height, 100);
  EXPECT_EQ(r.width, 133);
  EXPECT_EQ(r.top, 0);
  EXPECT_EQ(r.left, (400 - 133) / 2);
}

TEST(TransformsTest, CenterCropOffsetsAndPadding) {
  at::Tensor img = test_image(3, 10, 12, 5);
  Rng rng(0);
  at::Tensor out = TransformPipeline({op("center_crop", {4, 6})}).apply(img, rng);
  EXPECT_TRUE(out.equal(img.slice(1, 3, 7).slice(2, 3, 9)));
  at::Tensor big = TransformPipeline({op("center_crop", {14, 12})}).apply(img, rng);
  ASSERT_EQ(big.sizes(), (std::vector<int64_t>{3, 14, 12}));
  EXPECT_TRUE(big.slice(1, 2, 12).equal(img));
  EXPECT_EQ(big.slice(1, 0, 2).max().item<int64_t>(), 0);
}

TEST(TransformsTest, RegionPathDrawsTheSameRectAsApply) {
  TransformPipeline pipeline({op("random_resized_crop", {24, 16}), op("horizontal_flip")});
  at::Tensor img = test_image(3, 90, 60, 6);
  ASSERT_TRUE(pipeline.can_decode_region(90, 60));
  for (uint64_t seed = 0; seed < 5; ++seed) {
    Rng a(seed), b(seed);
    at::Tensor full = pipeline.apply(img, a);
    const CropRect rect = pipeline.first_crop(90, 60, b);
    const auto [h, w] = pipeline.first_output_size();
    at::Tensor fast = pipeline.apply_from(1, crop_resize_bilinear(img, rect, h, w), b);
    EXPECT_TRUE(fast.equal(full)) << "seed " << seed;
  }
  EXPECT_FALSE(TransformPipeline({op("center_crop", {100})}).can_decode_region(90, 60));
  EXPECT_FALSE(TransformPipeline({op("horizontal_flip")}).can_decode_region(90, 60));
}

TEST(TransformsTest, OutputSizeAndValidation) {
  EXPECT_FALSE(TransformPipeline({op("horizontal_flip")}).output_size().has_value());
  auto size =
      TransformPipeline({op("resize", {40}), op("center_crop", {32, 30}), op("horizontal_flip")})
          .output_size();
  ASSERT_TRUE(size.has_value());
  EXPECT_EQ(size->first, 32);
  EXPECT_EQ(size->second, 30);
  try {
    TransformPipeline({op("resize", {8}), op("rotate", {8})});
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.transforms[1].name"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rotate"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TransformPipeline({op("resize", {})}), ConfigError);
  EXPECT_THROW(TransformPipeline({op("center_crop", {0, 3})}), ConfigError);
}

}  // namespace
}  // namespace brrr
