#include "core/ops/linear_bias.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include "core/error.h"
#include "core/ops/op_dtypes.h"

namespace brrr {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const bool shapes_ok = x.dim() >= 1 && weight.dim() == 2 && bias.dim() == 1 &&
                         x.size(-1) == weight.size(1) && bias.size(0) == weight.size(0);
  const bool same = x.scalar_type() == weight.scalar_type() &&
                    x.scalar_type() == bias.scalar_type() && x.device() == weight.device() &&
                    x.device() == bias.device();
  if (!shapes_ok || !same || !detail::is_kernel_float(x.scalar_type())) {
    throw DataError(fmt::format(
        "linear_bias: expected x (..., in), weight (out, in), bias (out,) of one floating dtype "
        "on one device, got x {} [{}] on {}, weight {} [{}] on {}, bias {} [{}] on {}",
        c10::toString(x.scalar_type()), fmt::join(x.sizes(), ", "), x.device().str(),
        c10::toString(weight.scalar_type()), fmt::join(weight.sizes(), ", "), weight.device().str(),
        c10::toString(bias.scalar_type()), fmt::join(bias.sizes(), ", "), bias.device().str()));
  }
}

class LinearBiasFunction : public torch::autograd::Function<LinearBiasFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({x, weight});
    return at::linear(x, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    if (!grads[0].defined()) return {{}, {}, {}};
    const at::Tensor g = grads[0].reshape({-1, weight.size(0)}).contiguous();  // (N, out)
    at::Tensor dx, dw, db;
    // addmm's backward for linear's addmm(b, x, W^T): d x = d y W; d W^T is taken as (d y^T x)^T,
    // so d W = d y^T x comes out contiguous in W's layout.
    if (ctx->needs_input_grad(0)) dx = g.mm(weight).view(x.sizes());
    if (ctx->needs_input_grad(1)) dw = g.t().mm(x.reshape({-1, x.size(-1)}));
    if (ctx->needs_input_grad(2)) db = column_sum(g);
    return {dx, dw, db};
  }
};

}  // namespace

at::Tensor column_sum(const at::Tensor& t) {
  if (t.dim() != 2 || !detail::is_kernel_float(t.scalar_type())) {
    throw DataError(fmt::format("column_sum: expected a floating (N, C) tensor, got {} [{}]",
                                c10::toString(t.scalar_type()), fmt::join(t.sizes(), ", ")));
  }
  if (t.is_cuda() && detail::linear_bias_cuda_built()) {
    return detail::column_sum_cuda(t.contiguous());
  }
  return at::sum(t, 0);
}

namespace detail {

at::Tensor linear_bias_function(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias) {
  check_args(x, weight, bias);
  return LinearBiasFunction::apply(x, weight, bias);
}

}  // namespace detail

at::Tensor linear_bias(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!(x.is_cuda() && detail::linear_bias_cuda_built())) return at::linear(x, weight, bias);
  // A custom Function is invisible to autocast: cast as autocast casts at::linear's arguments
  // (lower precision, leaf weights through its per-region cache), differentiably.
  const c10::DeviceType type = x.device().type();
  if (at::autocast::is_autocast_enabled(type)) {
    const at::ScalarType dtype = at::autocast::get_autocast_dtype(type);
    return detail::linear_bias_function(at::autocast::cached_cast(dtype, x, type),
                                        at::autocast::cached_cast(dtype, weight, type),
                                        at::autocast::cached_cast(dtype, bias, type));
  }
  return detail::linear_bias_function(x, weight, bias);
}

}  // namespace brrr
