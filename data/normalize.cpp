#include "data/normalize.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype) {
  if (images_u8.scalar_type() != at::kByte || images_u8.dim() != 4) {
    throw DataError(fmt::format("normalize_images: expected uint8 (B, C, H, W), got {} [{}]",
                                std::string(c10::toString(images_u8.scalar_type())),
                                fmt::join(images_u8.sizes(), ", ")));
  }
  if (mean.empty() && std.empty()) {
    at::Tensor out = images_u8.mul(1.0 / 255.0);  // uint8 * double scalar -> float32, one kernel
    return dtype == at::kFloat ? out : out.to(dtype);
  }
  const int64_t channels = images_u8.size(1);
  const auto n = static_cast<int64_t>(mean.size());
  if (mean.size() != std.size() || (n != channels && n != 1)) {
    throw DataError(fmt::format(
        "normalize_images: mean [{}] and std [{}] need {} values (or one) "
        "for images of shape [{}]",
        fmt::join(mean, ", "), fmt::join(std, ", "), channels, fmt::join(images_u8.sizes(), ", ")));
  }
  std::vector<float> scale(n), shift(n);
  for (int64_t c = 0; c < n; ++c) {
    if (!(std[c] > 0.0)) {
      throw DataError(fmt::format("normalize_images: std[{}] must be > 0, got {}", c, std[c]));
    }
    scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    shift[c] = static_cast<float>(-mean[c] / std[c]);
  }
  const auto options = at::TensorOptions().dtype(at::kFloat).device(images_u8.device());
  // (1, n, 1, 1) so they broadcast over (B, C, H, W); tiny host-to-device copies.
  const at::Tensor scale_t = at::tensor(scale, at::kFloat).view({1, n, 1, 1}).to(options);
  const at::Tensor shift_t = at::tensor(shift, at::kFloat).view({1, n, 1, 1}).to(options);
  at::Tensor out = at::addcmul(shift_t, images_u8, scale_t);  // shift + x * scale, float32
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace brrr
