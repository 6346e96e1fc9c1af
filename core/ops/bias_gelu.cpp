#include "core/ops/bias_gelu.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <cmath>

#include "core/error.h"

namespace brrr {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_args(const at::Tensor& x, const at::Tensor& bias) {
  const at::ScalarType dtype = x.scalar_type();
  if (x.dim() != 2 || (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kHalf &&
                       dtype != at::kBFloat16)) {
    throw DataError(
        fmt::format("bias_gelu: x must be (N, D) float32, float64, bfloat16 or "
                    "float16, got {} [{}]",
                    c10::toString(dtype), fmt::join(x.sizes(), ", ")));
  }
  if (bias.dim() != 1 || bias.size(0) != x.size(1) ||
      (bias.scalar_type() != dtype && bias.scalar_type() != at::kFloat) ||
      bias.device() != x.device()) {
    throw DataError(fmt::format(
        "bias_gelu: bias must be ({},) {} or Float on {} for x {} [{}], got {} [{}] on {}",
        x.size(1), c10::toString(dtype), x.device().str(), c10::toString(dtype),
        fmt::join(x.sizes(), ", "), c10::toString(bias.scalar_type()),
        fmt::join(bias.sizes(), ", "), bias.device().str()));
  }
}

// x + bias in the accumulator type (float; float64 for float64 x), as the kernels form it.
at::Tensor biased(const at::Tensor& x, const at::Tensor& bias) {
  const at::ScalarType acc = at::toOpMathType(x.scalar_type());
  return x.to(acc) + bias.to(acc);
}

// The backward kernel's math: gelu_tanh(v) = v (1 + t) / 2 with t = tanh(k0 (v + k1 v^3)), so
//   gelu_tanh'(v) = (1 + t) / 2 + v (1 - t^2) k0 (1 + 3 k1 v^2) / 2,
//   dx = dy * gelu_tanh'(x + bias) rounded to x's dtype, dbias = sum over rows of that dx.
std::vector<at::Tensor> backward_stage_cpu(const at::Tensor& dy, const at::Tensor& x,
                                           const at::Tensor& bias) {
  const double k0 = std::sqrt(2.0 / M_PI), k1 = 0.044715;
  const at::Tensor v = biased(x, bias);
  const at::Tensor t = (k0 * (v + k1 * v.pow(3))).tanh_();
  const at::Tensor slope = 0.5 * (1 + t) + 0.5 * k0 * v * (1 - t * t) * (1 + 3 * k1 * v * v);
  const at::Tensor dx = (dy.to(v.scalar_type()) * slope).to(x.scalar_type());
  return {dx, dx.to(v.scalar_type()).sum(0).to(bias.scalar_type())};
}

class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias) {
    ctx->save_for_backward({x, bias});  // x + bias is recomputed in backward, not kept
    if (x.is_cuda()) return detail::bias_gelu_forward_cuda(x, bias);
    return at::gelu(biased(x, bias), "tanh").to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();
    return saved[0].is_cuda() ? detail::bias_gelu_backward_cuda(dy, saved[0], saved[1])
                              : backward_stage_cpu(dy, saved[0], saved[1]);
  }
};

}  // namespace

at::Tensor bias_gelu_reference(const at::Tensor& x, const at::Tensor& bias) {
  check_args(x, bias);
  return at::gelu(biased(x, bias), "tanh").to(x.scalar_type());
}

namespace detail {

at::Tensor bias_gelu_function(const at::Tensor& x, const at::Tensor& bias) {
  check_args(x, bias);
  return BiasGeluFunction::apply(x.contiguous(), bias.contiguous());
}

}  // namespace detail

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  if (x.is_cuda() && detail::bias_gelu_cuda_built()) return detail::bias_gelu_function(x, bias);
  return bias_gelu_reference(x, bias);
}

}  // namespace brrr
