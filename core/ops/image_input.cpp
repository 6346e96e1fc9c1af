#include "core/ops/image_input.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

namespace {

void check_args(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                at::ScalarType dtype, at::MemoryFormat memory_format) {
  if (x.scalar_type() != at::kByte || x.dim() != 4) {
    throw DataError(fmt::format("image_input: expected uint8 images (B, C, H, W), got {} [{}]",
                                c10::toString(x.scalar_type()), fmt::join(x.sizes(), ", ")));
  }
  const int64_t channels = x.size(1);
  for (const at::Tensor* t : {&scale, &shift}) {
    if (t->scalar_type() != at::kFloat || t->dim() != 1 ||
        (t->size(0) != channels && t->size(0) != 1) || t->device() != x.device()) {
      throw DataError(fmt::format(
          "image_input: scale/shift must be float32 ({},) or (1,) on {}, got {} [{}] on {}",
          channels, x.device().str(), c10::toString(t->scalar_type()), fmt::join(t->sizes(), ", "),
          t->device().str()));
    }
  }
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) {
    throw DataError(
        fmt::format("image_input: output dtype must be float32, bfloat16 or float16, "
                    "got {}",
                    c10::toString(dtype)));
  }
  if (memory_format != at::MemoryFormat::Contiguous &&
      memory_format != at::MemoryFormat::ChannelsLast) {
    throw DataError("image_input: memory_format must be Contiguous or ChannelsLast");
  }
}

}  // namespace

at::Tensor image_input_reference(const at::Tensor& x, const at::Tensor& scale,
                                 const at::Tensor& shift, at::ScalarType dtype,
                                 at::MemoryFormat memory_format) {
  check_args(x, scale, shift, dtype, memory_format);
  const int64_t n = scale.size(0);
  // NHWC conversion on the uint8 input (4x fewer bytes); the elementwise ops keep the layout.
  const at::Tensor xs = x.contiguous(memory_format);
  // x * scale, then + shift: two float32 roundings, as the kernel does.
  const at::Tensor out =
      xs.to(at::kFloat).mul(scale.view({1, n, 1, 1})).add(shift.view({1, n, 1, 1}));
  return (dtype == at::kFloat ? out : out.to(dtype)).contiguous(memory_format);
}

at::Tensor image_input(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                       at::ScalarType dtype, at::MemoryFormat memory_format) {
  if (x.is_cuda() && detail::image_input_cuda_built()) {
    check_args(x, scale, shift, dtype, memory_format);
    return detail::image_input_cuda(x.contiguous(), scale.contiguous(), shift.contiguous(), dtype,
                                    memory_format);
  }
  return image_input_reference(x, scale, shift, dtype, memory_format);
}

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
  if (scale_.empty()) {  // x / 255
    scale_.push_back(static_cast<float>(1.0 / 255.0));
    shift_.push_back(0.0f);
  }
}

at::Tensor ImageNormalizer::operator()(const at::Tensor& images_u8, at::ScalarType dtype,
                                       at::MemoryFormat memory_format) const {
  if (images_u8.scalar_type() != at::kByte || images_u8.dim() != 4) {
    throw DataError(fmt::format("normalize_images: expected uint8 (B, C, H, W), got {} [{}]",
                                c10::toString(images_u8.scalar_type()),
                                fmt::join(images_u8.sizes(), ", ")));
  }
  const auto n = static_cast<int64_t>(scale_.size());
  if (n != images_u8.size(1) && n != 1) {
    throw DataError(fmt::format(
        "normalize_images: mean/std hold {} values; images of shape [{}] need {} (or one)", n,
        fmt::join(images_u8.sizes(), ", "), images_u8.size(1)));
  }
  at::Tensor scale_t, shift_t;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& cached = on_device_[images_u8.device().str()];
    if (!cached.first.defined()) {
      const auto options = at::TensorOptions().dtype(at::kFloat).device(images_u8.device());
      cached.first = at::tensor(scale_, at::kFloat).to(options);  // copied once per device
      cached.second = at::tensor(shift_, at::kFloat).to(options);
    }
    scale_t = cached.first;
    shift_t = cached.second;
  }
  return image_input(images_u8, scale_t, shift_t, dtype, memory_format);
}

at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype) {
  return ImageNormalizer(mean, std)(images_u8, dtype);
}

}  // namespace brrr
