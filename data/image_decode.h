#pragma once
// Image decoding: JPEG through libjpeg-turbo's libjpeg API, PNG through libpng, to uint8 tensors.
//
// Invariants: every function here is pure CPU code with no global state, safe in forked workers.
// Every failure (corrupt, truncated, unsupported) throws brrr::DataError whose message names the
// file (the `name` argument) and the library's own message. Outputs are contiguous uint8.
//
// The JPEG region path (`decode_jpeg_region`) is what makes random-resized-crop cheap: only the
// header is parsed to learn the size, the transform picks a rectangle, and libjpeg decodes only
// the rows and iMCU columns of that rectangle, at the smallest DCT scale (N/8) that still leaves
// at least the requested output resolution.
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace brrr {

/// Memory layout of decoded pixels.
enum class ImageLayout { kHWC, kCHW };

/// Stored geometry of an image file.
struct ImageInfo {
  int64_t height = 0;
  int64_t width = 0;
  /// Channels the decoder produces natively: 1 (gray, gray+alpha) or 3 (colour, palette, +alpha).
  int64_t channels = 0;
};

/// An integer pixel rectangle in an image (the crop chosen by a transform).
struct CropRect {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// Result of a region decode. `image` holds the decoded pixels at DCT scale `scale` (= N/8): a
/// window of the scaled image whose top-left pixel is (origin_top, origin_left) in scaled pixels,
/// covering `rect` (source pixels) plus a margin. Source pixel centre v maps to scaled coordinate
/// (v + 0.5) * scale - 0.5. resize_jpeg_region (data/transforms.h) turns it into the crop.
struct JpegRegion {
  /// (C, h, w) uint8, a view of the decoder's (h, w, C) buffer (not contiguous).
  at::Tensor image;
  /// The requested rectangle, in source pixels.
  CropRect rect;
  /// Scaled pixels per source pixel: scale_num / 8.
  double scale = 1.0;
  int scale_num = 8;
  int64_t origin_top = 0;
  int64_t origin_left = 0;
};

/// Whole file into memory; DataError naming the path when it cannot be read.
std::string read_file_bytes(const std::string& path);

/// Format sniffing from magic bytes (not from the file name).
bool is_jpeg(const uint8_t* data, size_t size);
bool is_png(const uint8_t* data, size_t size);

/// Geometry from the header only (JPEG or PNG).
ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name);

/// Decodes a JPEG or PNG held in memory. `channels`: 0 = native (1 or 3), 1 = gray, 3 = RGB
/// (gray is replicated). Alpha is dropped (not composited); 16-bit PNG samples keep their high
/// byte. Returns uint8 (H, W, C) or (C, H, W) per `layout`. `name` is used in error messages.
at::Tensor decode_image(const uint8_t* data, size_t size, const std::string& name, int channels = 0,
                        ImageLayout layout = ImageLayout::kCHW);

/// Reads and decodes a file (see decode_image).
at::Tensor decode_image_file(const std::string& path, int channels = 0,
                             ImageLayout layout = ImageLayout::kCHW);

/// Decodes only `rect` of a JPEG, at the smallest scale N/8 whose scaled rectangle is at least
/// (min_height, min_width). `rect` must lie inside the image. Returns CHW pixels (see JpegRegion).
JpegRegion decode_jpeg_region(const uint8_t* data, size_t size, const std::string& name,
                              const CropRect& rect, int64_t min_height, int64_t min_width,
                              int channels = 3);

/// Writes a uint8 (C, H, W) image, C = 1 or 3, as an 8-bit PNG. DataError naming the path on
/// failure.
void write_png(const std::string& path, const at::Tensor& image_chw);

}  // namespace brrr
