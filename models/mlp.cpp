#include "models/mlp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

Mlp::Mlp(const ModelOptions& options)
    : in_features_(options.in_channels * options.image_size * options.image_size),
      num_classes_(options.num_classes),
      dropout_(options.dropout) {
  if (options.in_channels <= 0 || options.image_size <= 0) {
    throw ConfigError(
        fmt::format("mlp: model.in_channels ({}) and model.image_size ({}) must be > 0",
                    options.in_channels, options.image_size));
  }
  if (num_classes_ <= 0) {
    throw ConfigError(fmt::format("mlp: model.num_classes must be > 0, got {}", num_classes_));
  }
  if (dropout_ < 0.0 || dropout_ >= 1.0) {
    throw ConfigError(fmt::format("mlp: model.dropout must be in [0, 1), got {}", dropout_));
  }
  hidden_ = register_module("hidden", torch::nn::ModuleList());
  int64_t width = in_features_;
  for (size_t i = 0; i < options.hidden_sizes.size(); ++i) {
    const int64_t next = options.hidden_sizes[i];
    if (next <= 0) {
      throw ConfigError(fmt::format("mlp: model.hidden_sizes[{}] must be > 0, got {}", i, next));
    }
    hidden_->push_back(torch::nn::Linear(width, next));
    width = next;
  }
  head_ = register_module("head", torch::nn::Linear(width, num_classes_));
}

at::Tensor Mlp::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.numel() / std::max<int64_t>(input.size(0), 1) != in_features_ ||
      !input.is_floating_point()) {
    throw Error(fmt::format("mlp: expected a float batch of {} features per example, got {} {}",
                            in_features_, c10::toString(input.scalar_type()),
                            fmt::join(input.sizes(), "x")));
  }
  at::Tensor x = input.flatten(1);  // (B, in_features)
  for (const auto& layer : *hidden_) {
    x = torch::dropout(torch::relu(layer->as<torch::nn::Linear>()->forward(x)), dropout_,
                       is_training());
  }
  return head_->forward(x);  // (B, num_classes)
}

double Mlp::flops_per_example() const {
  int64_t macs = 0;
  for (const auto& layer : *hidden_) macs += layer->as<torch::nn::Linear>()->weight.numel();
  macs += head_->weight.numel();
  return 6.0 * static_cast<double>(macs);
}

std::string Mlp::describe() const {
  std::vector<int64_t> widths;
  for (const auto& layer : *hidden_) {
    widths.push_back(layer->as<torch::nn::Linear>()->options.out_features());
  }
  return describe_with(
      fmt::format("mlp ({} -> [{}] -> {})", in_features_, fmt::join(widths, ", "), num_classes_));
}

}  // namespace brrr
