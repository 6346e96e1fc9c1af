#pragma once
// Normalisation of uint8 image batches, run on the device after the (4x smaller) uint8 copy.
#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <map>
#include <mutex>
#include <vector>

namespace brrr {

/// normalize_images() with its per-channel constants kept on each device it has seen, so the
/// per-step cost is one kernel and no host-to-device copy (a copy of pageable memory would make
/// the host wait for the device every step). Thread-safe.
class ImageNormalizer {
 public:
  /// Validates like normalize_images (DataError naming the values).
  ImageNormalizer(std::vector<double> mean, std::vector<double> std);
  /// `memory_format` ChannelsLast gives NHWC output (for channels-last conv models).
  at::Tensor operator()(const at::Tensor& images_u8, at::ScalarType dtype,
                        at::MemoryFormat memory_format = at::MemoryFormat::Contiguous) const;

 private:
  std::vector<float> scale_, shift_;  // (C,) or (1,): x * scale + shift
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::pair<at::Tensor, at::Tensor>> on_device_;  // device -> (1,C,1,1) x2
};

/// (B, C, H, W) uint8 on any device -> `dtype` (x / 255 - mean[c]) / std[c], computed in float32
/// as one fused multiply-add (x * (1 / (255 std)) + (-mean / std)). Empty mean and std -> x / 255.
/// mean/std hold C values (or one, broadcast). DataError naming the sizes otherwise.
at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype);

}  // namespace brrr
