#include "data/transforms.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {
namespace {

constexpr const char* kRandomResizedCrop = "random_resized_crop";
constexpr const char* kRandomCrop = "random_crop";
constexpr const char* kResize = "resize";
constexpr const char* kCenterCrop = "center_crop";
constexpr const char* kHorizontalFlip = "horizontal_flip";

bool is_sizing(const std::string& name) {
  return name != kHorizontalFlip;
}

/// Bilinear sampling positions along one axis of the output.
struct Axis {
  std::vector<int64_t> i0, i1;  // neighbouring buffer pixels
  std::vector<float> w1;        // weight of i1 (i0 gets 1 - w1)
};

// Output pixel d samples source-crop coordinate u = clamp(length/out * (d + 0.5) - 0.5, 0,
// length - 1) (PyTorch's align_corners=False rule; the clamp is what a real crop does at its
// edges). Source pixel `start + u` lies at buffer coordinate (start + u + 0.5) * scale - 0.5 -
// origin when the buffer holds the image at `scale`, beginning at pixel `origin`.
Axis make_axis(int64_t start, int64_t length, int64_t out, double scale, int64_t origin,
               int64_t buffer) {
  Axis axis;
  axis.i0.resize(out);
  axis.i1.resize(out);
  axis.w1.resize(out);
  const float step = static_cast<float>(length) / static_cast<float>(out);  // as PyTorch, in float
  for (int64_t d = 0; d < out; ++d) {
    float u = step * (static_cast<float>(d) + 0.5f) - 0.5f;
    u = std::min(std::max(u, 0.0f), static_cast<float>(length - 1));
    double y = (static_cast<double>(start) + u + 0.5) * scale - 0.5 - static_cast<double>(origin);
    y = std::min(std::max(y, 0.0), static_cast<double>(buffer - 1));
    const auto i0 = static_cast<int64_t>(y);
    axis.i0[d] = i0;
    axis.i1[d] = std::min(i0 + 1, buffer - 1);
    axis.w1[d] = static_cast<float>(y - static_cast<double>(i0));
  }
  return axis;
}

void check_image(const at::Tensor& image, const char* what) {
  if (image.scalar_type() != at::kByte || image.dim() != 3 || image.device().type() != at::kCPU) {
    throw DataError(fmt::format("{}: expected a CPU uint8 (C, H, W) image, got {} of shape [{}]",
                                what, std::string(c10::toString(image.scalar_type())),
                                fmt::join(image.sizes(), ", ")));
  }
}

// (C, H, W) uint8 -> contiguous (C, out_h, out_w) from precomputed sampling positions. The input
// may be planar (rows contiguous) or a permuted (H, W, C) decoder buffer, read in place. Separable,
// vertical first: per output row, the two source rows are blended over the columns the output
// reads (contiguous, vectorised), then each output pixel blends two entries of that row. Per output
// pixel that is the 2 gathers of one horizontal pass instead of the 4 of a direct blend.
at::Tensor resample(const at::Tensor& input, const Axis& ay, const Axis& ax) {
  const int64_t channels = input.size(0);
  const bool interleaved = input.stride(0) == 1 && input.stride(2) == channels;
  const at::Tensor image = interleaved || input.stride(2) == 1 ? input : input.contiguous();
  const int64_t stride_c = image.stride(0), stride_y = image.stride(1);
  const auto out_h = static_cast<int64_t>(ay.i0.size());
  const auto out_w = static_cast<int64_t>(ax.i0.size());
  at::Tensor out = at::empty({channels, out_h, out_w}, at::kByte);
  const uint8_t* in = image.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();

  // Source columns [lo, hi] (sampling positions never decrease along an axis).
  const int64_t lo = ax.i0.front(), span = ax.i1.back() - lo + 1;
  // Where column i, channel c of the blended row lives: (i - lo) * step + c * channel_step.
  const int64_t step = interleaved ? channels : 1;
  const int64_t channel_step = interleaved ? 1 : span;
  std::vector<int32_t> x0(out_w), x1(out_w);
  std::vector<float> wx0(out_w), wx1(out_w);
  for (int64_t x = 0; x < out_w; ++x) {
    x0[x] = static_cast<int32_t>((ax.i0[x] - lo) * step);
    x1[x] = static_cast<int32_t>((ax.i1[x] - lo) * step);
    wx0[x] = 1.0f - ax.w1[x];
    wx1[x] = ax.w1[x];
  }
  std::vector<float> blended(static_cast<size_t>(channels * span));
  const int64_t plane = out_h * out_w;
  for (int64_t y = 0; y < out_h; ++y) {
    const float wy = ay.w1[y];
    const uint8_t* r0 = in + ay.i0[y] * stride_y + lo * step;
    const uint8_t* r1 = in + ay.i1[y] * stride_y + lo * step;
    const int64_t runs = interleaved ? 1 : channels;
    const int64_t run = interleaved ? span * channels : span;
    for (int64_t k = 0; k < runs; ++k) {
      const uint8_t* a = r0 + k * stride_c;
      const uint8_t* b = r1 + k * stride_c;
      float* v = blended.data() + k * run;
      for (int64_t i = 0; i < run; ++i) {
        v[i] = static_cast<float>(a[i]) * (1.0f - wy) + static_cast<float>(b[i]) * wy;
      }
    }
    // In [0, 255] (a convex combination), so +0.5 and truncation rounds to nearest.
    auto blend = [](const float* v, int32_t a, int32_t b, float wa, float wb) {
      return static_cast<uint8_t>(static_cast<int32_t>(v[a] * wa + v[b] * wb + 0.5f));
    };
    if (interleaved && channels == 3) {  // RGB from the JPEG decoder: one pass for the 3 planes
      uint8_t* d = dst + y * out_w;
      const float* v = blended.data();
      for (int64_t x = 0; x < out_w; ++x) {
        const int32_t a = x0[x], b = x1[x];
        const float wa = wx0[x], wb = wx1[x];
        d[x] = blend(v, a, b, wa, wb);
        d[plane + x] = blend(v, a + 1, b + 1, wa, wb);
        d[2 * plane + x] = blend(v, a + 2, b + 2, wa, wb);
      }
      continue;
    }
    for (int64_t c = 0; c < channels; ++c) {
      const float* v = blended.data() + c * channel_step;
      uint8_t* d = dst + c * plane + y * out_w;
      for (int64_t x = 0; x < out_w; ++x) d[x] = blend(v, x0[x], x1[x], wx0[x], wx1[x]);
    }
  }
  return out;
}

std::pair<int64_t, int64_t> hw(const TransformOptions& op) {
  return {op.size[0], op.size[1]};
}

// torchvision's F.center_crop offsets (round half to even, as Python's round()).
CropRect center_rect(int64_t height, int64_t width, int64_t th, int64_t tw) {
  CropRect r;
  r.top = static_cast<int64_t>(std::nearbyint((height - th) / 2.0));
  r.left = static_cast<int64_t>(std::nearbyint((width - tw) / 2.0));
  r.height = th;
  r.width = tw;
  return r;
}

}  // namespace

at::Tensor resize_bilinear(const at::Tensor& image_chw, int64_t out_h, int64_t out_w) {
  check_image(image_chw, "resize");
  return crop_resize_bilinear(image_chw, CropRect{0, 0, image_chw.size(1), image_chw.size(2)},
                              out_h, out_w);
}

at::Tensor crop_resize_bilinear(const at::Tensor& image_chw, const CropRect& rect, int64_t out_h,
                                int64_t out_w) {
  check_image(image_chw, "crop_resize");
  const int64_t h = image_chw.size(1), w = image_chw.size(2);
  if (out_h <= 0 || out_w <= 0 || rect.height <= 0 || rect.width <= 0 || rect.top < 0 ||
      rect.left < 0 || rect.top + rect.height > h || rect.left + rect.width > w) {
    throw DataError(fmt::format(
        "crop_resize: rect top={} left={} height={} width={} -> {}x{} is invalid for a {}x{} image",
        rect.top, rect.left, rect.height, rect.width, out_h, out_w, h, w));
  }
  return resample(image_chw, make_axis(rect.top, rect.height, out_h, 1.0, 0, h),
                  make_axis(rect.left, rect.width, out_w, 1.0, 0, w));
}

at::Tensor resize_jpeg_region(const JpegRegion& region, int64_t out_h, int64_t out_w) {
  check_image(region.image, "resize_jpeg_region");
  const CropRect& r = region.rect;
  return resample(
      region.image,
      make_axis(r.top, r.height, out_h, region.scale, region.origin_top, region.image.size(1)),
      make_axis(r.left, r.width, out_w, region.scale, region.origin_left, region.image.size(2)));
}

CropRect random_resized_crop_rect(int64_t height, int64_t width, const std::vector<double>& scale,
                                  const std::vector<double>& ratio, Rng& rng) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_r0 = std::log(ratio[0]), log_r1 = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale[0], scale[1]);
    const double aspect = std::exp(rng.uniform(log_r0, log_r1));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropRect r;
      r.top = rng.randint(0, height - h);
      r.left = rng.randint(0, width - w);
      r.height = h;
      r.width = w;
      return r;
    }
  }
  // Fallback: the whole image, narrowed to the nearest allowed aspect ratio, centred.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = static_cast<int64_t>(std::nearbyint(width / ratio[0]));
  } else if (in_ratio > ratio[1]) {
    w = static_cast<int64_t>(std::nearbyint(height * ratio[1]));
  }
  return CropRect{(height - h) / 2, (width - w) / 2, h, w};
}

TransformPipeline::TransformPipeline(std::vector<TransformOptions> ops, const std::string& key)
    : key_(key), ops_(std::move(ops)) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    TransformOptions& op = ops_[i];
    const std::string at = fmt::format("{}[{}]", key, i);
    const std::vector<std::string> known = {kRandomResizedCrop, kRandomCrop, kResize, kCenterCrop,
                                            kHorizontalFlip};
    if (std::find(known.begin(), known.end(), op.name) == known.end()) {
      throw ConfigError(fmt::format("{}.name: unknown transform '{}' (expected one of {})", at,
                                    op.name, fmt::join(known, ", ")));
    }
    if (is_sizing(op.name)) {
      if (op.size.size() == 1) op.size = {op.size[0], op.size[0]};
      if (op.size.size() != 2 || op.size[0] <= 0 || op.size[1] <= 0) {
        throw ConfigError(
            fmt::format("{}.size: {} needs [height, width] (or one number) > 0, got [{}]", at,
                        op.name, fmt::join(op.size, ", ")));
      }
    }
    if (op.name == kRandomResizedCrop) {
      if (op.scale.size() != 2 || !(0.0 < op.scale[0] && op.scale[0] <= op.scale[1])) {
        throw ConfigError(fmt::format("{}.scale: expected [lo, hi] with 0 < lo <= hi, got [{}]", at,
                                      fmt::join(op.scale, ", ")));
      }
      if (op.ratio.size() != 2 || !(0.0 < op.ratio[0] && op.ratio[0] <= op.ratio[1])) {
        throw ConfigError(fmt::format("{}.ratio: expected [lo, hi] with 0 < lo <= hi, got [{}]", at,
                                      fmt::join(op.ratio, ", ")));
      }
    }
    if (op.padding < 0) {
      throw ConfigError(fmt::format("{}.padding: must be >= 0, got {}", at, op.padding));
    }
    if (op.p < 0.0 || op.p > 1.0) {
      throw ConfigError(fmt::format("{}.p: must be in [0, 1], got {}", at, op.p));
    }
  }
}

void TransformPipeline::check_fits(int64_t height, int64_t width) const {
  int64_t h = height, w = width;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const TransformOptions& op = ops_[i];
    if (!is_sizing(op.name)) continue;
    const int64_t th = op.size[0], tw = op.size[1];
    if (op.name == kRandomCrop && (h + 2 * op.padding < th || w + 2 * op.padding < tw)) {
      throw ConfigError(
          fmt::format("{}[{}].size", key_, i),
          fmt::format("random_crop {}x{} is larger than the {}x{} image it receives (padding {}); "
                      "crop smaller, pad, or resize before it",
                      th, tw, h, w, op.padding));
    }
    h = th;
    w = tw;
  }
}

at::Tensor TransformPipeline::apply(const at::Tensor& image_chw, Rng& rng) const {
  return apply_from(0, image_chw, rng);
}

at::Tensor TransformPipeline::apply_from(size_t first, const at::Tensor& image_chw,
                                         Rng& rng) const {
  check_image(image_chw, "transforms");
  at::Tensor image = image_chw;
  for (size_t i = first; i < ops_.size(); ++i) image = apply_one(ops_[i], image, rng);
  return image.contiguous();
}

at::Tensor TransformPipeline::apply_one(const TransformOptions& op, const at::Tensor& image,
                                        Rng& rng) const {
  const int64_t h = image.size(1), w = image.size(2);
  if (op.name == kHorizontalFlip) {
    return rng.bernoulli(op.p) ? image.flip({2}) : image;
  }
  const auto [th, tw] = hw(op);
  if (op.name == kRandomResizedCrop) {
    return crop_resize_bilinear(image, random_resized_crop_rect(h, w, op.scale, op.ratio, rng), th,
                                tw);
  }
  if (op.name == kResize) return resize_bilinear(image, th, tw);
  if (op.name == kRandomCrop) {
    const int64_t p = op.padding;
    const int64_t ph = h + 2 * p, pw = w + 2 * p;
    if (ph < th || pw < tw) {
      throw DataError(fmt::format(
          "random_crop: crop {}x{} is larger than the {}x{} image (padding {})", th, tw, h, w, p));
    }
    const int64_t top = rng.randint(0, ph - th), left = rng.randint(0, pw - tw);
    const at::Tensor padded = p > 0 ? at::constant_pad_nd(image, {p, p, p, p}, 0) : image;
    return padded.slice(1, top, top + th).slice(2, left, left + tw);
  }
  // center_crop: like torchvision, an image smaller than the crop is zero-padded first.
  at::Tensor src = image;
  if (th > h || tw > w) {
    const int64_t pl = tw > w ? (tw - w) / 2 : 0, pt = th > h ? (th - h) / 2 : 0;
    const int64_t pr = tw > w ? (tw - w + 1) / 2 : 0, pb = th > h ? (th - h + 1) / 2 : 0;
    src = at::constant_pad_nd(image, {pl, pr, pt, pb}, 0);
  }
  const CropRect r = center_rect(src.size(1), src.size(2), th, tw);
  return src.slice(1, r.top, r.top + th).slice(2, r.left, r.left + tw);
}

bool TransformPipeline::can_decode_region(int64_t height, int64_t width) const {
  if (ops_.empty()) return false;
  const TransformOptions& op = ops_[0];
  if (op.name == kRandomResizedCrop || op.name == kResize) return true;
  return op.name == kCenterCrop && height >= op.size[0] && width >= op.size[1];
}

CropRect TransformPipeline::first_crop(int64_t height, int64_t width, Rng& rng) const {
  if (!can_decode_region(height, width)) {
    throw DataError(
        fmt::format("transforms: op 0 ({}) cannot drive region decoding of a {}x{} image",
                    ops_.empty() ? "none" : ops_[0].name, height, width));
  }
  const TransformOptions& op = ops_[0];
  if (op.name == kRandomResizedCrop) {
    return random_resized_crop_rect(height, width, op.scale, op.ratio, rng);
  }
  if (op.name == kResize) return CropRect{0, 0, height, width};
  return center_rect(height, width, op.size[0], op.size[1]);
}

std::pair<int64_t, int64_t> TransformPipeline::first_output_size() const {
  if (ops_.empty() || !is_sizing(ops_[0].name)) {
    throw DataError("transforms: op 0 is not a sizing transform");
  }
  return hw(ops_[0]);
}

std::optional<std::pair<int64_t, int64_t>> TransformPipeline::output_size() const {
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    if (is_sizing(it->name)) return hw(*it);
  }
  return std::nullopt;
}

std::string TransformPipeline::describe() const {
  std::vector<std::string> parts;
  for (const TransformOptions& op : ops_) {
    if (op.name == kHorizontalFlip) {
      parts.push_back(fmt::format("{}(p={})", op.name, op.p));
    } else if (op.name == kRandomCrop && op.padding > 0) {
      parts.push_back(
          fmt::format("{}({}x{}, padding={})", op.name, op.size[0], op.size[1], op.padding));
    } else {
      parts.push_back(fmt::format("{}({}x{})", op.name, op.size[0], op.size[1]));
    }
  }
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, " -> "));
}

}  // namespace brrr
