#pragma once
// The Model interface every brrr model implements, and parameter counting.
//
// Invariant: parameter and buffer names are PyTorch's state_dict names of the reference
// architecture (torchvision ResNet, nanoGPT GPT-2, ...), so weights move between brrr and PyTorch
// by name (models/state_dict.h). Tied weights are one tensor: Module::parameters() lists it once.
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace brrr {

/// What a model's forward() consumes and produces, which decides loss and metrics.
enum class Task {
  /// image (B, C, H, W) float, normalised -> logits (B, num_classes).
  kClassification,
  /// tokens (B, T) int64 -> next-token logits (B, T, vocab_size).
  kLanguageModel,
};

/// A trainable model built by make_model() (models/registry.h).
class Model : public torch::nn::Module {
 public:
  /// image (B, C, H, W) float -> logits (B, num_classes); tokens (B, T) int64 -> logits (B, T, V).
  /// Throws brrr::Error naming the shape/dtype when the input does not fit the model.
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  /// kLanguageModel: the mean next-token cross-entropy of forward(input)'s logits against
  /// targets (B, T), ignore_index -100. `fused`: through ops::fused_classifier (the logits read
  /// in their dtype, never copied to float32; their gradient written in place), else log_softmax
  /// in float32 + nll_loss. A model whose output head can fold into the loss overrides it.
  virtual at::Tensor language_model_loss(const at::Tensor& input, const at::Tensor& targets,
                                         bool fused);
  /// The brrr::ops (core/ops) that forward() and language_model_loss() run when fused, in step
  /// order; empty for a model without fused ops (its loss then takes ops::fused_classifier).
  virtual std::vector<std::string> fused_ops() const { return {}; }
  /// The input/output contract of forward().
  virtual Task task() const = 0;
  /// Estimated FLOPs of one forward + backward pass of one example (one sequence of block_size
  /// tokens for language models), for throughput and MFU reporting.
  virtual double flops_per_example() const = 0;
  /// One line for logs, e.g. "resnet18 (stem imagenet, 3->1000): 11.69M parameters, 10.9
  /// GFLOPs/example".
  virtual std::string describe() const;

 protected:
  /// "<head>: <N>M parameters, <F> GFLOPs/example (fwd+bwd)" — the common tail of describe().
  std::string describe_with(const std::string& head) const;
};

/// Number of distinct parameter elements of `module` (a tensor shared by two modules counts once).
int64_t count_parameters(const torch::nn::Module& module);

/// Per-example multiply-adds of a 2-D convolution producing an out_h x out_w map (groups = 1).
/// Model files use it for their FLOPs estimates: FLOPs(fwd+bwd) = 6 * multiply-adds.
int64_t conv2d_macs(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t out_h,
                    int64_t out_w);

/// Output side of a convolution or pooling window: floor((in + 2 pad - kernel) / stride) + 1.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad);

}  // namespace brrr
