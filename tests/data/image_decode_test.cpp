// Decoding against pixels produced by tests/golden/gen_images.py (Pillow / numpy), corrupt input,
// and equivalence of the JPEG region fast path with full decode + crop + resize.
#include "data/image_decode.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.h"
#include "data/transforms.h"
#include "tests/test_fs.h"

namespace brrr {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) {
  return (fs::path(BRRR_GOLDEN_DIR) / "images" / name).string();
}

c10::Dict<c10::IValue, c10::IValue> expected() {
  const std::string bytes = read_file_bytes(golden("expected.pt"));
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
}

at::Tensor expected_tensor(const std::string& key) {
  return expected().at(key).toTensor();
}

std::string bytes_of(const std::string& name) {
  return read_file_bytes(golden(name));
}

const uint8_t* u8(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

int64_t max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kInt) - b.to(at::kInt)).abs().max().item<int64_t>();
}

std::string expect_data_error(const std::string& bytes, const std::string& name) {
  try {
    decode_image(u8(bytes), bytes.size(), name, 3);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError for " << name;
  return "";
}

TEST(ImageDecodeTest, PngVariantsMatchSourcePixels) {
  for (const char* name : {"gray8.png", "gray16.png", "gray_alpha.png", "rgb8.png", "rgba8.png",
                           "rgb16.png", "palette.png", "gray1.png"}) {
    SCOPED_TRACE(name);
    at::Tensor want = expected_tensor(name);  // (H, W, C)
    at::Tensor got = decode_image_file(golden(name), 0, ImageLayout::kHWC);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.equal(want));
  }
}

TEST(ImageDecodeTest, JpegMatchesPillowDecode) {
  // Same libjpeg-turbo algorithms (ISLOW IDCT, fancy upsampling) as Pillow: identical pixels.
  for (const char* name : {"rgb420.jpg", "rgb444.jpg", "progressive.jpg", "gray.jpg"}) {
    SCOPED_TRACE(name);
    at::Tensor want = expected_tensor(name);
    at::Tensor got = decode_image_file(golden(name), 0, ImageLayout::kHWC);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_EQ(max_abs_diff(got, want), 0);
  }
}

TEST(ImageDecodeTest, CmykJpegDecodesToPillowsRgb) {
  // Pillow reads CMYK JPEGs (Adobe-inverted) and converts them to RGB; brrr gives the same pixels
  // instead of refusing the file, also through the region decoder and as gray.
  at::Tensor want = expected_tensor("cmyk.jpg");  // (H, W, 3)
  at::Tensor got = decode_image_file(golden("cmyk.jpg"), 0, ImageLayout::kHWC);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(max_abs_diff(got, want), 0);
  at::Tensor gray = decode_image_file(golden("cmyk.jpg"), 1, ImageLayout::kHWC);
  EXPECT_EQ(max_abs_diff(gray, expected_tensor("cmyk_gray.jpg")), 0);
  const std::string jpg = bytes_of("cmyk.jpg");
  EXPECT_EQ(read_image_info(u8(jpg), jpg.size(), "cmyk.jpg").channels, 3);
  const JpegRegion region =
      decode_jpeg_region(u8(jpg), jpg.size(), "cmyk.jpg", CropRect{8, 16, 32, 48}, 32, 48, 3);
  ASSERT_EQ(region.scale_num, 8);
  const at::Tensor crop = region.image.permute({1, 2, 0});  // (h, w, 3) from origin_top/left
  const int64_t top = 8 - region.origin_top, left = 16 - region.origin_left;
  EXPECT_TRUE(crop.slice(0, top, top + 32)
                  .slice(1, left, left + 48)
                  .equal(want.slice(0, 8, 40).slice(1, 16, 64)));
}

TEST(ImageDecodeTest, ForcedChannelsAndChwLayout) {
  at::Tensor gray = expected_tensor("gray8.png");  // (H, W, 1)
  at::Tensor rgb = decode_image_file(golden("gray8.png"), 3, ImageLayout::kCHW);
  ASSERT_EQ(rgb.sizes(), (std::vector<int64_t>{3, gray.size(0), gray.size(1)}));
  EXPECT_TRUE(rgb.is_contiguous());
  for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(rgb[c].equal(gray.select(2, 0)));
  at::Tensor jpeg_gray = decode_image_file(golden("gray.jpg"), 3, ImageLayout::kCHW);
  EXPECT_TRUE(jpeg_gray[0].equal(jpeg_gray[2]));
  EXPECT_EQ(decode_image_file(golden("rgb444.jpg"), 1).size(0), 1);
}

TEST(ImageDecodeTest, HeaderInfoWithoutDecoding) {
  const std::string jpg = bytes_of("large420.jpg");
  ImageInfo info = read_image_info(u8(jpg), jpg.size(), "large420.jpg");
  EXPECT_EQ(info.height, 333);
  EXPECT_EQ(info.width, 501);
  EXPECT_EQ(info.channels, 3);
  const std::string png = bytes_of("gray16.png");
  info = read_image_info(u8(png), png.size(), "gray16.png");
  EXPECT_EQ(info.height, 13);
  EXPECT_EQ(info.width, 17);
  EXPECT_EQ(info.channels, 1);
}

TEST(ImageDecodeTest, TruncatedJpegThrowsNamingFile) {
  const std::string jpg = bytes_of("rgb420.jpg");
  std::string message = expect_data_error(jpg.substr(0, jpg.size() / 2), "photos/cat_001.jpg");
  EXPECT_NE(message.find("photos/cat_001.jpg"), std::string::npos) << message;
  EXPECT_NE(message.find("JPEG"), std::string::npos) << message;
  message = expect_data_error(jpg.substr(0, 40), "header_only.jpg");
  EXPECT_NE(message.find("header_only.jpg"), std::string::npos) << message;
}

TEST(ImageDecodeTest, CorruptPngThrowsWithLibpngMessage) {
  std::string png = bytes_of("rgb8.png");
  png[png.size() - 20] ^= 0x5A;  // inside IDAT (or its CRC): libpng reports a CRC/data error
  std::string message = expect_data_error(png, "bad.png");
  EXPECT_NE(message.find("bad.png"), std::string::npos) << message;
  EXPECT_NE(message.find("PNG"), std::string::npos) << message;
  message = expect_data_error(bytes_of("rgb8.png").substr(0, 60), "short.png");
  EXPECT_NE(message.find("short.png"), std::string::npos) << message;
}

TEST(ImageDecodeTest, UnknownFormatAndMissingFileThrow) {
  std::string message = expect_data_error("GIF89a not supported here", "anim.gif");
  EXPECT_NE(message.find("anim.gif"), std::string::npos) << message;
  EXPECT_THROW(decode_image_file("/nonexistent/brrr/img.png"), DataError);
  try {
    decode_image_file("/nonexistent/brrr/img.png");
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/brrr/img.png"), std::string::npos);
  }
}

// At full scale the region path must reproduce full decode + crop + resize exactly.
TEST(ImageDecodeTest, RegionDecodeAtFullScaleIsExact) {
  for (const char* name : {"large420.jpg", "large444.jpg"}) {
    SCOPED_TRACE(name);
    const std::string jpg = bytes_of(name);
    at::Tensor full = decode_image(u8(jpg), jpg.size(), name, 3);  // (3, H, W)
    for (CropRect rect : {CropRect{17, 29, 101, 133}, CropRect{0, 0, 40, 40},
                          CropRect{150, 120, full.size(1) - 150, full.size(2) - 120}}) {
      JpegRegion region =
          decode_jpeg_region(u8(jpg), jpg.size(), name, rect, rect.height, rect.width);
      EXPECT_EQ(region.scale_num, 8);
      EXPECT_LT(region.image.size(1), full.size(1));  // fewer rows decoded than the whole image
      at::Tensor fast = resize_jpeg_region(region, 64, 48);
      at::Tensor slow = crop_resize_bilinear(full, rect, 64, 48);
      EXPECT_EQ(max_abs_diff(fast, slow), 0) << rect.top << "," << rect.left;
    }
  }
}

// At reduced DCT scales the IDCT itself averages (a box pre-filter), so pixels differ from a
// full-resolution bilinear sample by a few levels on this smooth image; the crop must still be the
// same region (a misplaced crop would differ by tens of levels).
TEST(ImageDecodeTest, RegionDecodeAtReducedScaleIsFaithful) {
  const std::string jpg = bytes_of("large420.jpg");
  at::Tensor full = decode_image(u8(jpg), jpg.size(), "large420.jpg", 3);
  const CropRect rect{41, 77, 240, 360};
  for (int64_t out : {30, 45, 60, 100}) {
    SCOPED_TRACE(out);
    JpegRegion region = decode_jpeg_region(u8(jpg), jpg.size(), "large420.jpg", rect, out, out);
    EXPECT_LT(region.scale_num, 8);
    EXPECT_TRUE(region.scale_num == 1 || region.scale_num == 2 || region.scale_num == 4);
    EXPECT_GE(rect.height * region.scale_num, out * 8);  // enough resolution was kept
    if (region.scale_num > 1) {  // and the next smaller scale had too little
      EXPECT_LT(rect.height * (region.scale_num / 2), out * 8);
    }
    at::Tensor fast = resize_jpeg_region(region, out, out).to(at::kFloat);
    at::Tensor slow = crop_resize_bilinear(full, rect, out, out).to(at::kFloat);
    EXPECT_LT((fast - slow).abs().mean().item<double>(), 2.0);
    EXPECT_LT((fast - slow).abs().max().item<double>(), 16.0);
  }
}

TEST(ImageDecodeTest, RegionOutsideImageThrows) {
  const std::string jpg = bytes_of("large420.jpg");
  EXPECT_THROW(decode_jpeg_region(u8(jpg), jpg.size(), "x.jpg", CropRect{300, 0, 40, 40}, 8, 8),
               DataError);
}

TEST(ImageDecodeTest, WritePngRoundTrips) {
  const fs::path dir = fs::temp_directory_path() / ("brrr_png_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  at::Tensor rgb = at::randint(0, 256, {3, 9, 14}, at::kByte);
  at::Tensor gray = at::randint(0, 256, {1, 5, 3}, at::kByte);
  write_png((dir / "rgb.png").string(), rgb);
  write_png((dir / "gray.png").string(), gray);
  EXPECT_TRUE(decode_image_file((dir / "rgb.png").string()).equal(rgb));
  EXPECT_TRUE(decode_image_file((dir / "gray.png").string()).equal(gray));
  EXPECT_THROW(write_png((dir / "bad.png").string(), at::zeros({2, 4, 4}, at::kByte)), DataError);
  brrr::test::remove_tree(dir);
}

}  // namespace
}  // namespace brrr
