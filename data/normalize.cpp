#include "data/normalize.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

namespace {

void check_images(const at::Tensor& images_u8) {
  if (images_u8.scalar_type() != at::kByte || images_u8.dim() != 4) {
    throw DataError(fmt::format("normalize_images: expected uint8 (B, C, H, W), got {} [{}]",
                                std::string(c10::toString(images_u8.scalar_type())),
                                fmt::join(images_u8.sizes(), ", ")));
  }
}

}  // namespace

ImageNormalizer::ImageNormalizer(std::vector<double> mean, std::vector<double> std) {
  if (mean.size() != std.size()) {
    throw DataError(fmt::format("normalize_images: mean [{}] and std [{}] differ in length",
                                fmt::join(mean, ", "), fmt::join(std, ", ")));
  }
  for (size_t c = 0; c < mean.size(); ++c) {
    if (!(std[c] > 0.0)) {
      throw DataError(fmt::format("normalize_images: std[{}] must be > 0, got {}", c, std[c]));
    }
    scale_.push_back(static_cast<float>(1.0 / (255.0 * std[c])));
    shift_.push_back(static_cast<float>(-mean[c] / std[c]));
  }
}

at::Tensor ImageNormalizer::operator()(const at::Tensor& images_u8, at::ScalarType dtype,
                                       at::MemoryFormat memory_format) const {
  check_images(images_u8);
  // NHWC conversion on the uint8 input (4x fewer bytes); the elementwise op keeps the layout.
  const at::Tensor x = images_u8.contiguous(memory_format);
  if (scale_.empty()) {
    at::Tensor out = x.mul(1.0 / 255.0);  // uint8 * double scalar -> float32, one kernel
    return dtype == at::kFloat ? out : out.to(dtype);
  }
  const auto n = static_cast<int64_t>(scale_.size());
  const int64_t channels = x.size(1);
  if (n != channels && n != 1) {
    throw DataError(fmt::format("normalize_images: mean/std hold {} values; images of shape [{}] need {} (or one)",
                                n, fmt::join(x.sizes(), ", "), channels));
  }
  at::Tensor scale_t, shift_t;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& cached = on_device_[x.device().str()];
    if (!cached.first.defined()) {
      const auto options = at::TensorOptions().dtype(at::kFloat).device(x.device());
      // (1, n, 1, 1) so they broadcast over (B, C, H, W); copied once per device.
      cached.first = at::tensor(scale_, at::kFloat).view({1, n, 1, 1}).to(options);
      cached.second = at::tensor(shift_, at::kFloat).view({1, n, 1, 1}).to(options);
    }
    scale_t = cached.first;
    shift_t = cached.second;
  }
  at::Tensor out = at::addcmul(shift_t, x, scale_t);  // shift + x * scale, float32
  return dtype == at::kFloat ? out : out.to(dtype);
}

at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype) {
  return ImageNormalizer(mean, std)(images_u8, dtype);
}

}  // namespace brrr
