#pragma once
// `convnet`: a small CNN for 28x28 grayscale images (Fashion-MNIST) that trains in seconds per
// epoch on a couple of CPU cores. Per width c of `channels`:
//   conv3x3(c, no bias) -> BatchNorm -> ReLU -> maxpool 2x2          (side halves each block)
// then flatten -> Dropout -> Linear(c_last * side^2, 64) -> ReLU -> Dropout -> Linear(64, classes).
// With the default channels {32, 64}: 220k parameters, 4.0M multiply-adds per 28x28 image.
// Parameter names: conv<i>.weight,
// bn<i>.{weight,bias,running_mean,running_var,num_batches_tracked}, fc.{weight,bias},
// head.{weight,bias}.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "core/config.h"
#include "models/model.h"

namespace brrr {

class ConvNet : public Model {
 public:
  /// Width of the hidden fully connected layer before the classifier.
  static constexpr int64_t kHiddenWidth = 64;

  /// Uses in_channels, image_size, channels, num_classes, dropout. Throws ConfigError naming the
  /// `model.*` key of an invalid value (e.g. too many blocks for the image size).
  explicit ConvNet(const ModelOptions& options);

  /// (B, in_channels, image_size, image_size) float -> (B, num_classes).
  at::Tensor forward(const at::Tensor& input) override;
  Task task() const override { return Task::kClassification; }
  double flops_per_example() const override { return flops_; }
  std::string describe() const override;

 private:
  int64_t in_channels_;
  int64_t image_size_;
  double dropout_;
  double flops_ = 0.0;
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> bns_;
  torch::nn::Linear fc_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace brrr
