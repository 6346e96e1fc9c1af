#include "models/model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <unordered_set>

#include "core/ops/fused_classifier.h"

namespace brrr {

at::Tensor Model::language_model_loss(const at::Tensor& input, const at::Tensor& targets,
                                      bool fused) {
  const at::Tensor logits = forward(input);                       // (B, T, V)
  const at::Tensor flat = logits.reshape({-1, logits.size(-1)});  // (B T, V)
  if (fused) return fused_classifier(flat, targets.reshape({-1}));
  // log_softmax's dtype argument converts while reading, where logits.float() would first write
  // a float32 copy of the (B T, V) logits (1.6 GB for GPT-2 at 8 x 1024) and its backward a cast.
  return at::nll_loss(at::log_softmax(flat, 1, at::kFloat), targets.reshape({-1}), {},
                      at::Reduction::Mean, kIgnoreIndex);
}

std::string Model::describe() const {
  return describe_with(name());
}

std::string Model::describe_with(const std::string& head) const {
  return fmt::format("{}: {:.2f}M parameters, {:.3g} GFLOPs/example (fwd+bwd)", head,
                     static_cast<double>(count_parameters(*this)) / 1e6, flops_per_example() / 1e9);
}

int64_t count_parameters(const torch::nn::Module& module) {
  // Module::parameters() does not deduplicate: a tensor registered in two modules (e.g. a tied
  // output head) would be counted twice. Identity is the TensorImpl.
  std::unordered_set<const c10::TensorImpl*> seen;
  int64_t total = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) total += p.numel();
  }
  return total;
}

int64_t conv2d_macs(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t out_h,
                    int64_t out_w) {
  return in_channels * kernel * kernel * out_channels * out_h * out_w;
}

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

}  // namespace brrr
