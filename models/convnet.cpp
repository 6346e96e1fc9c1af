#include "models/convnet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace brrr {

ConvNet::ConvNet(const ModelOptions& options)
    : in_channels_(options.in_channels),
      image_size_(options.image_size),
      dropout_(options.dropout) {
  if (options.channels.empty()) {
    throw ConfigError("convnet: model.channels must list at least one block width");
  }
  if (in_channels_ <= 0 || options.num_classes <= 0) {
    throw ConfigError(
        fmt::format("convnet: model.in_channels ({}) and model.num_classes ({}) "
                    "must be > 0",
                    in_channels_, options.num_classes));
  }
  if (dropout_ < 0.0 || dropout_ >= 1.0) {
    throw ConfigError(fmt::format("convnet: model.dropout must be in [0, 1), got {}", dropout_));
  }
  int64_t side = image_size_;
  int64_t width = in_channels_;
  int64_t macs = 0;
  for (size_t i = 0; i < options.channels.size(); ++i) {
    const int64_t c = options.channels[i];
    if (c <= 0) {
      throw ConfigError(fmt::format("convnet: model.channels[{}] must be > 0, got {}", i, c));
    }
    if (side < 2) {
      throw ConfigError(
          fmt::format("convnet: model.image_size {} is too small for {} blocks "
                      "(each halves the side)",
                      image_size_, options.channels.size()));
    }
    // BN follows, so the conv bias would be redundant.
    convs_.push_back(register_module(
        fmt::format("conv{}", i),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(width, c, 3).padding(1).bias(false))));
    bns_.push_back(register_module(fmt::format("bn{}", i), torch::nn::BatchNorm2d(c)));
    macs += conv2d_macs(width, c, 3, side, side);  // 'same' padding: side unchanged by the conv
    side /= 2;                                     // maxpool 2x2, floor
    width = c;
  }
  const int64_t flat = width * side * side;
  fc_ = register_module("fc", torch::nn::Linear(flat, kHiddenWidth));
  head_ = register_module("head", torch::nn::Linear(kHiddenWidth, options.num_classes));
  macs += flat * kHiddenWidth + kHiddenWidth * options.num_classes;
  flops_ = 6.0 * static_cast<double>(macs);
}

at::Tensor ConvNet::forward(const at::Tensor& input) {
  if (input.dim() != 4 || input.size(1) != in_channels_ || !input.is_floating_point()) {
    throw Error(fmt::format("convnet: expected a float (B, {}, H, W) batch, got {} [{}]",
                            in_channels_, c10::toString(input.scalar_type()),
                            fmt::join(input.sizes(), ", ")));
  }
  at::Tensor x = input;  // (B, C, H, W)
  for (size_t i = 0; i < convs_.size(); ++i) {
    x = torch::max_pool2d(torch::relu(bns_[i]->forward(convs_[i]->forward(x))), 2);
  }
  x = torch::dropout(x.flatten(1), dropout_, is_training());  // (B, C_last * side^2)
  if (x.size(1) != fc_->options.in_features()) {
    throw Error(fmt::format("convnet: built for {}x{} images, got {}x{}", image_size_, image_size_,
                            input.size(2), input.size(3)));
  }
  x = torch::dropout(torch::relu(fc_->forward(x)), dropout_, is_training());  // (B, 64)
  return head_->forward(x);                                                   // (B, classes)
}

std::string ConvNet::describe() const {
  std::vector<int64_t> widths;
  for (const auto& conv : convs_) widths.push_back(conv->options.out_channels());
  return describe_with(fmt::format("convnet (channels [{}], {}x{}x{} -> {})",
                                   fmt::join(widths, ", "), in_channels_, image_size_, image_size_,
                                   head_->options.out_features()));
}

}  // namespace brrr
