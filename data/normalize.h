#pragma once
// Normalisation of uint8 image batches, run on the device after the (4x smaller) uint8 copy.
#include <ATen/core/Tensor.h>

#include <vector>

namespace brrr {

/// (B, C, H, W) uint8 on any device -> `dtype` (x / 255 - mean[c]) / std[c], computed in float32
/// as one fused multiply-add (x * (1 / (255 std)) + (-mean / std)). Empty mean and std -> x / 255.
/// mean/std hold C values (or one, broadcast). DataError naming the sizes otherwise.
at::Tensor normalize_images(const at::Tensor& images_u8, const std::vector<double>& mean,
                            const std::vector<double>& std, at::ScalarType dtype);

}  // namespace brrr
