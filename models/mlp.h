#pragma once
// `mlp`: flatten -> [Linear -> ReLU -> Dropout] per hidden width -> Linear head.
// Parameter names: hidden.<i>.{weight,bias}, head.{weight,bias}.
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "core/config.h"
#include "models/model.h"

namespace brrr {

class Mlp : public Model {
 public:
  /// Uses in_channels * image_size^2 inputs, hidden_sizes, num_classes, dropout.
  /// Throws ConfigError naming the `model.*` key of an invalid value.
  explicit Mlp(const ModelOptions& options);

  /// (B, C, H, W) or (B, C*H*W) float -> (B, num_classes).
  at::Tensor forward(const at::Tensor& input) override;
  Task task() const override { return Task::kClassification; }
  double flops_per_example() const override;
  std::string describe() const override;

 private:
  int64_t in_features_;
  int64_t num_classes_;
  double dropout_;
  torch::nn::ModuleList hidden_;  // Linear layers, widths options.hidden_sizes
  torch::nn::Linear head_{nullptr};
};

}  // namespace brrr
