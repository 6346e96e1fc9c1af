#include "models/resnet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/ops/batch_norm_act.h"

namespace brrr {
namespace detail {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Shared by both block kinds: the shortcut and the multiply-add count of one block.
struct BlockShape {
  int64_t in_channels;
  int64_t width;     // channels of the 3x3 conv
  int64_t stride;    // of the 3x3 conv and the shortcut
  int64_t in_side;   // input spatial side
  int64_t out_side;  // output spatial side
  bool fused;        // the norms through ops::batch_norm_act (model.fused)
};

/// bn(x) (+ residual), then ReLU when `relu`: through ops::batch_norm_act when `fused` (one cuDNN
/// call each way for channels-last bf16/fp16 CUDA tensors in training, else its ATen reference),
/// else the module and ATen's add and relu, as torchvision. Either way the module's running
/// statistics and num_batches_tracked advance as BatchNorm2d::forward advances them.
at::Tensor norm(torch::nn::BatchNorm2d& bn, const at::Tensor& x, const at::Tensor& residual,
                bool relu, bool fused) {
  if (!fused) {
    at::Tensor y = bn->forward(x);
    if (residual.defined()) y = y + residual;
    return relu ? torch::relu(y) : y;
  }
  const auto& o = bn->options;
  if (bn->is_training() && o.track_running_stats()) bn->num_batches_tracked += 1;
  return batch_norm_act(x, residual, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                        bn->is_training() || !o.track_running_stats(), o.momentum().value_or(0.1),
                        o.eps(), relu);
}

/// conv 1x1/stride + BN projection when the block changes shape (torchvision's `downsample`).
torch::nn::Sequential make_downsample(const BlockShape& s, int64_t out_channels) {
  return torch::nn::Sequential(conv(s.in_channels, out_channels, 1, s.stride),
                               torch::nn::BatchNorm2d(out_channels));
}

/// torchvision BasicBlock: conv3x3/s-BN-ReLU-conv3x3-BN (+ shortcut) -ReLU. Expansion 1.
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  explicit BasicBlockImpl(const BlockShape& s)
      // In declaration order (convs, then norms), which is the order members are initialised and
      // so the order parameters are registered in.
      : conv1(register_module("conv1", conv(s.in_channels, s.width, 3, s.stride))),
        conv2(register_module("conv2", conv(s.width, s.width, 3, 1))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(s.width))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(s.width))),
        fused(s.fused) {
    if (s.stride != 1 || s.in_channels != s.width) {
      downsample = register_module("downsample", make_downsample(s, s.width));
    }
  }

  static int64_t macs(const BlockShape& s) {
    const int64_t o = s.out_side;
    int64_t m =
        conv2d_macs(s.in_channels, s.width, 3, o, o) + conv2d_macs(s.width, s.width, 3, o, o);
    if (s.stride != 1 || s.in_channels != s.width)
      m += conv2d_macs(s.in_channels, s.width, 1, o, o);
    return m;
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = norm(bn1, conv1->forward(x), {}, true, fused);
    return norm(bn2, conv2->forward(out), downsample ? downsample->forward(x) : x, true, fused);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::BatchNorm2d bn1, bn2;
  torch::nn::Sequential downsample{nullptr};
  bool fused;
};
TORCH_MODULE(BasicBlock);

/// torchvision Bottleneck (v1.5): conv1x1-BN-ReLU-conv3x3/s-BN-ReLU-conv1x1(x4)-BN (+ shortcut)
/// -ReLU.
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  explicit BottleneckImpl(const BlockShape& s)
      // In declaration order (convs, then norms): see BasicBlockImpl.
      : conv1(register_module("conv1", conv(s.in_channels, s.width, 1, 1))),
        conv2(register_module("conv2", conv(s.width, s.width, 3, s.stride))),
        conv3(register_module("conv3", conv(s.width, s.width * kExpansion, 1, 1))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(s.width))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(s.width))),
        bn3(register_module("bn3", torch::nn::BatchNorm2d(s.width * kExpansion))),
        fused(s.fused) {
    if (s.stride != 1 || s.in_channels != s.width * kExpansion) {
      downsample = register_module("downsample", make_downsample(s, s.width * kExpansion));
    }
  }

  static int64_t macs(const BlockShape& s) {
    const int64_t out_channels = s.width * kExpansion;
    const int64_t i = s.in_side;
    const int64_t o = s.out_side;
    int64_t m = conv2d_macs(s.in_channels, s.width, 1, i, i) +
                conv2d_macs(s.width, s.width, 3, o, o) +
                conv2d_macs(s.width, out_channels, 1, o, o);
    if (s.stride != 1 || s.in_channels != out_channels) {
      m += conv2d_macs(s.in_channels, out_channels, 1, o, o);
    }
    return m;
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = norm(bn1, conv1->forward(x), {}, true, fused);
    out = norm(bn2, conv2->forward(out), {}, true, fused);
    return norm(bn3, conv3->forward(out), downsample ? downsample->forward(x) : x, true, fused);
  }

  torch::nn::Conv2d conv1, conv2, conv3;
  torch::nn::BatchNorm2d bn1, bn2, bn3;
  torch::nn::Sequential downsample{nullptr};
  bool fused;
};
TORCH_MODULE(Bottleneck);

/// Appends `blocks` blocks of `Block` to `layer`; updates channels/side; returns multiply-adds.
template <typename Block, typename BlockImpl>
int64_t build_layer(torch::nn::Sequential& layer, int64_t blocks, int64_t width, int64_t stride,
                    bool fused, int64_t& channels, int64_t& side) {
  int64_t macs = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t s = b == 0 ? stride : 1;
    const BlockShape shape{channels, width, s, side, conv_output_size(side, 3, s, 1), fused};
    layer->push_back(Block(shape));
    macs += BlockImpl::macs(shape);
    channels = width * BlockImpl::kExpansion;
    side = shape.out_side;
  }
  return macs;
}

}  // namespace
}  // namespace detail

ResNet::ResNet(const ModelOptions& options, int depth)
    : depth_(depth),
      imagenet_stem_(options.stem == "imagenet"),
      fused_(options.fused != "false"),
      in_channels_(options.in_channels),
      image_size_(options.image_size) {
  if (depth != 18 && depth != 50) {
    throw ConfigError(fmt::format("resnet: depth must be 18 or 50, got {}", depth));
  }
  if (options.stem != "imagenet" && options.stem != "small") {
    throw ConfigError(fmt::format("resnet{}: model.stem must be 'imagenet' or 'small', got '{}'",
                                  depth, options.stem));
  }
  if (in_channels_ <= 0 || options.num_classes <= 0 || image_size_ <= 0) {
    throw ConfigError(
        fmt::format("resnet{}: model.in_channels ({}), model.num_classes ({}) and "
                    "model.image_size ({}) must be > 0",
                    depth, in_channels_, options.num_classes, image_size_));
  }
  int64_t side = image_size_;
  int64_t macs = 0;
  if (imagenet_stem_) {
    conv1_ = register_module("conv1", detail::conv(in_channels_, 64, 7, 2));
    side = conv_output_size(side, 7, 2, 3);
    macs += conv2d_macs(in_channels_, 64, 7, side, side);
    side = conv_output_size(side, 3, 2, 1);  // maxpool
  } else {
    conv1_ = register_module("conv1", detail::conv(in_channels_, 64, 3, 1));
    macs += conv2d_macs(in_channels_, 64, 3, side, side);
  }
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(64));

  const std::array<int64_t, 4> blocks =
      depth == 18 ? std::array<int64_t, 4>{2, 2, 2, 2} : std::array<int64_t, 4>{3, 4, 6, 3};
  int64_t channels = 64;
  for (size_t i = 0; i < 4; ++i) {
    const int64_t width = int64_t{64} << i;  // 64, 128, 256, 512
    const int64_t stride = i == 0 ? 1 : 2;
    layers_[i] = torch::nn::Sequential();
    macs += depth == 18 ? detail::build_layer<detail::BasicBlock, detail::BasicBlockImpl>(
                              layers_[i], blocks[i], width, stride, fused_, channels, side)
                        : detail::build_layer<detail::Bottleneck, detail::BottleneckImpl>(
                              layers_[i], blocks[i], width, stride, fused_, channels, side);
    register_module(fmt::format("layer{}", i + 1), layers_[i]);
  }
  fc_ = register_module("fc", torch::nn::Linear(channels, options.num_classes));
  macs += channels * options.num_classes;
  flops_ = 6.0 * static_cast<double>(macs);

  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
}

at::Tensor ResNet::forward(const at::Tensor& input) {
  if (input.dim() != 4 || input.size(1) != in_channels_ || !input.is_floating_point()) {
    throw Error(fmt::format("resnet{}: expected a float (B, {}, H, W) batch, got {} [{}]", depth_,
                            in_channels_, c10::toString(input.scalar_type()),
                            fmt::join(input.sizes(), ", ")));
  }
  at::Tensor x = detail::norm(bn1_, conv1_->forward(input), {}, true, fused_);  // (B, 64, H', W')
  if (imagenet_stem_) x = torch::max_pool2d(x, 3, 2, 1);
  for (auto& layer : layers_) x = layer->forward(x);     // (B, 512 * expansion, h, w)
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // (B, 512 * expansion)
  return fc_->forward(x);                                // (B, num_classes)
}

std::vector<std::string> ResNet::fused_ops() const {
  return fused_ ? std::vector<std::string>{"batch_norm_act"} : std::vector<std::string>{};
}

std::string ResNet::describe() const {
  return describe_with(fmt::format("resnet{} (stem {}, {}x{}x{} -> {})", depth_,
                                   imagenet_stem_ ? "imagenet" : "small", in_channels_, image_size_,
                                   image_size_, fc_->options.out_features()));
}

}  // namespace brrr
