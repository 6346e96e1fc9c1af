#pragma once
// `resnet18` / `resnet50`: torchvision's ResNet v1.5 (stride on the 3x3 conv of a Bottleneck),
// with torchvision's parameter names (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc, ...)
// and initialisation (convs Kaiming-normal fan_out, BN weight 1 / bias 0, fc PyTorch default).
// Stems: `imagenet` = conv 7x7/2 + BN + ReLU + maxpool 3x3/2; `small` = conv 3x3/1 + BN + ReLU
// (no maxpool) for 32x32 inputs. With model.fused every norm followed by a ReLU is one
// ops::batch_norm_act (with the block's shortcut add for the last norm of a block).
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <array>

#include "core/config.h"
#include "models/model.h"

namespace brrr {

class ResNet : public Model {
 public:
  /// `depth` 18 (BasicBlock x [2,2,2,2]) or 50 (Bottleneck x [3,4,6,3]). Uses in_channels,
  /// num_classes, stem and image_size (for the FLOPs estimate only; any input size >= 32 works).
  /// Throws ConfigError naming the `model.*` key of an invalid value.
  ResNet(const ModelOptions& options, int depth);

  /// (B, in_channels, H, W) float -> (B, num_classes).
  at::Tensor forward(const at::Tensor& input) override;
  Task task() const override { return Task::kClassification; }
  double flops_per_example() const override { return flops_; }
  std::string describe() const override;
  /// With model.fused (auto or true): batch_norm_act, each norm with its ReLU (and the block's
  /// shortcut add) in one op; the downsample projections' norms stay BatchNorm2d's.
  std::vector<std::string> fused_ops() const override;

 private:
  int depth_;
  bool imagenet_stem_;
  bool fused_;
  int64_t in_channels_;
  int64_t image_size_;
  double flops_ = 0.0;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::array<torch::nn::Sequential, 4> layers_;  // layer1..layer4: residual blocks
  torch::nn::Linear fc_{nullptr};
};

}  // namespace brrr
