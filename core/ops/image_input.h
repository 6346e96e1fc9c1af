#pragma once
// Op `image_input`: a uint8 image batch -> the model's input, (x / 255 - mean[c]) / std[c] in the
// compute dtype and the model's memory format, in one pass over the (4x smaller) uint8 copy.
//
//   x:      (B, C, H, W) uint8, any device (the loader's NCHW batch; other layouts are made
//           contiguous first)
//   scale:  (C,) or (1,) float32 on x's device: 1 / (255 std[c])
//   shift:  same shape: -mean[c] / std[c]
//   out:    (B, C, H, W) `dtype` (float32, bf16 or fp16) in `memory_format` (Contiguous or
//           ChannelsLast), out = x * scale[c] + shift[c] computed in float32 and rounded once
//           to `dtype`.
//
// Paths: image_input_reference (ATen ops; the CPU path and the tests' oracle) and, for CUDA
// tensors in a build with CUDA, one kernel (image_input.cu) that reads NCHW uint8 and writes the
// output layout directly. The kernel multiplies and adds with round-to-nearest in two steps (no
// FMA), so it equals the reference bit for bit. No gradient flows into an image batch, so the op
// has no backward.
#include <ATen/core/Tensor.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace brrr {

/// The op, dispatched on x's device. Throws DataError naming shapes/dtypes for bad input.
at::Tensor image_input(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                       at::ScalarType dtype, at::MemoryFormat memory_format);

/// The reference: ATen ops on any device.
at::Tensor image_input_reference(const at::Tensor& x, const at::Tensor& scale,
                                 const at::Tensor& shift, at::ScalarType dtype,
                                 at::MemoryFormat memory_format);

namespace detail {
/// The CUDA kernel's launcher (image_input.cu); throws in a build without CUDA. Arguments as
/// image_input, already checked; x contiguous NCHW.
at::Tensor image_input_cuda(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                            at::ScalarType dtype, at::MemoryFormat memory_format);
/// Whether this build has the CUDA kernel.
bool image_input_cuda_built();
}  // namespace detail

/// image_input with the per-channel constants of data.mean/data.std kept on each device it has
/// seen, so the per-step cost is one kernel and no host-to-device copy (a copy of pageable memory
/// would make the host wait for the device every step). Thread-safe.
class ImageNormalizer {
 public:
  /// Empty mean and std: x / 255. Throws DataError naming the values when they differ in length
  /// or a std is not > 0.
  ImageNormalizer(std::vector<double> mean, std::vector<double> std);
  /// `memory_format` ChannelsLast gives NHWC output (for channels-last conv models).
  at::Tensor operator()(const at::Tensor& images_u8, at::ScalarType dtype,
                        at::MemoryFormat memory_format = at::MemoryFormat::Contiguous) const;

 private:
  std::vector<float> scale_, shift_;  // (C,) or (1,)
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::pair<at::Tensor, at::Tensor>> on_device_;  // device -> (n,) x2
};

/// One-off form: (B, C, H, W) uint8 -> `dtype` (x / 255 - mean[c]) / std[c], NCHW.
at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype);

}  // namespace brrr
