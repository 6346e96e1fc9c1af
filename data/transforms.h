#pragma once
// Image augmentation on uint8 (C, H, W) CPU tensors, with torchvision's semantics.
//
// Invariants: every random decision is drawn from the Rng passed in (so a sample is a pure function
// of (seed, epoch, index)); an op draws the same number of values whatever the image, so the region
// fast path (first_crop) and apply() consume the Rng identically. Outputs are contiguous.
//
// Resize is bilinear, align_corners=False, without antialiasing (PyTorch's
// interpolate(mode="bilinear", antialias=False) rule for source indices), computed in float and
// rounded to nearest: within +-1 of PyTorch on the same uint8 input converted to float.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/rng.h"
#include "data/image_decode.h"

namespace brrr {

/// Bilinear resize of a uint8 (C, H, W) image to (C, out_h, out_w).
at::Tensor resize_bilinear(const at::Tensor& image_chw, int64_t out_h, int64_t out_w);

/// Crop `rect` of a uint8 (C, H, W) image and resize it to (out_h, out_w), in one pass; identical
/// to resize_bilinear(crop) (edge samples clamp to the rectangle, as after a real crop).
at::Tensor crop_resize_bilinear(const at::Tensor& image_chw, const CropRect& rect, int64_t out_h,
                                int64_t out_w);

/// The crop of a region-decoded JPEG, resized to (out_h, out_w): the same sampling positions as
/// crop_resize_bilinear on the full-resolution image, read from the DCT-scaled pixels.
at::Tensor resize_jpeg_region(const JpegRegion& region, int64_t out_h, int64_t out_w);

/// torchvision's RandomResizedCrop.get_params: 10 attempts of (area scale, log-aspect) sampling,
/// then a centre crop clamped to the ratio range.
CropRect random_resized_crop_rect(int64_t height, int64_t width, const std::vector<double>& scale,
                                  const std::vector<double>& ratio, Rng& rng);

/// An ordered list of transforms built from `data.transforms`.
class TransformPipeline {
 public:
  TransformPipeline() = default;
  /// Validates names, sizes and ranges; throws ConfigError naming `<key>[i].<field>`.
  explicit TransformPipeline(std::vector<TransformOptions> ops,
                             const std::string& key = "data.transforms");

  /// For a source of (height, width): ConfigError (keyed `<key>[i].size`) when a random_crop
  /// would be larger than the image it receives, padding included. Datasets whose image size
  /// is fixed call it once, so the config error comes at start, not from a worker.
  void check_fits(int64_t height, int64_t width) const;

  /// Applies every op to a uint8 (C, H, W) image.
  at::Tensor apply(const at::Tensor& image_chw, Rng& rng) const;
  /// Applies ops [first, size()).
  at::Tensor apply_from(size_t first, const at::Tensor& image_chw, Rng& rng) const;

  /// True when op 0 is a crop + resize of the source whose rectangle depends only on the source
  /// size and the Rng (random_resized_crop, resize, or center_crop of a large enough image): it can
  /// drive JPEG region decoding.
  bool can_decode_region(int64_t height, int64_t width) const;
  /// For such an op 0: its rectangle on a (height, width) source, drawn exactly as apply() would.
  CropRect first_crop(int64_t height, int64_t width, Rng& rng) const;
  /// Output (height, width) of op 0 (a sizing op).
  std::pair<int64_t, int64_t> first_output_size() const;

  /// The output (height, width) when it does not depend on the input: the size of the last
  /// sizing op (flips keep it). nullopt when no op fixes the size.
  std::optional<std::pair<int64_t, int64_t>> output_size() const;

  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  /// e.g. "random_resized_crop(224x224) -> horizontal_flip(p=0.5)".
  std::string describe() const;

 private:
  at::Tensor apply_one(const TransformOptions& op, const at::Tensor& image, Rng& rng) const;

  std::string key_;
  /// Validated ops; `size` always holds [height, width] for sizing ops.
  std::vector<TransformOptions> ops_;
};

}  // namespace brrr
