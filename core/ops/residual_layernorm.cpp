#include "core/ops/residual_layernorm.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include "core/error.h"
#include "core/ops/op_dtypes.h"

namespace brrr {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_args(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
                const at::Tensor& bias, at::ScalarType out_dtype, const at::Tensor& x_bias) {
  const at::ScalarType dtype = residual.scalar_type();
  if (residual.dim() != 2 || residual.size(1) == 0 || !detail::is_kernel_float(dtype)) {
    throw DataError(
        fmt::format("residual_layernorm: residual must be (N, C) with C > 0, "
                    "float32, float64, bfloat16 or float16, got {} [{}]",
                    c10::toString(dtype), fmt::join(residual.sizes(), ", ")));
  }
  // x in residual's dtype, or the narrower bf16/fp16 of a branch under autocast when the stream
  // is float32 (added in float, as `residual + x` promotes).
  const at::ScalarType xt = x.scalar_type();
  const bool x_dtype_ok =
      xt == dtype || (dtype == at::kFloat && (xt == at::kBFloat16 || xt == at::kHalf));
  if (x.sizes() != residual.sizes() || !x_dtype_ok || x.device() != residual.device()) {
    throw DataError(fmt::format(
        "residual_layernorm: x must be [{}] on {} in residual's dtype {}{}, got {} [{}] on {}",
        fmt::join(residual.sizes(), ", "), residual.device().str(), c10::toString(dtype),
        dtype == at::kFloat ? " (or bfloat16/float16)" : "", c10::toString(xt),
        fmt::join(x.sizes(), ", "), x.device().str()));
  }
  const int64_t channels = residual.size(1);
  const at::ScalarType param = at::toOpMathType(dtype);
  for (const at::Tensor* t : {&weight, &bias}) {
    if (t->scalar_type() != param || t->dim() != 1 || t->size(0) != channels ||
        t->device() != residual.device()) {
      throw DataError(fmt::format(
          "residual_layernorm: weight and bias must be {} ({},) on {} for residual {} [{}], "
          "got {} [{}] on {}",
          c10::toString(param), channels, residual.device().str(), c10::toString(dtype),
          fmt::join(residual.sizes(), ", "), c10::toString(t->scalar_type()),
          fmt::join(t->sizes(), ", "), t->device().str()));
    }
  }
  if (x_bias.defined() && (x_bias.scalar_type() != param || x_bias.dim() != 1 ||
                           x_bias.size(0) != channels || x_bias.device() != residual.device())) {
    throw DataError(fmt::format(
        "residual_layernorm: x_bias must be {} ({},) on {} for residual {} [{}], got {} [{}] on {}",
        c10::toString(param), channels, residual.device().str(), c10::toString(dtype),
        fmt::join(residual.sizes(), ", "), c10::toString(x_bias.scalar_type()),
        fmt::join(x_bias.sizes(), ", "), x_bias.device().str()));
  }
  if (!detail::is_kernel_float(out_dtype)) {
    throw DataError(
        fmt::format("residual_layernorm: out_dtype must be float32, float64, "
                    "bfloat16 or float16, got {}",
                    c10::toString(out_dtype)));
  }
}

// The forward kernel's math in ATen ops: {new_residual, y, mean, rstd}.
std::vector<at::Tensor> forward_stage_cpu(const at::Tensor& residual, const at::Tensor& x,
                                          const at::Tensor& weight, const at::Tensor& bias,
                                          double eps, at::ScalarType out_dtype,
                                          const at::Tensor& x_bias) {
  const at::ScalarType acc = weight.scalar_type();
  const at::Tensor xf = x_bias.defined() ? x.to(acc).add(x_bias) : x.to(acc);
  const at::Tensor h = residual.to(acc).add(xf).to(residual.scalar_type());
  const at::Tensor hf = h.to(acc);
  const at::Tensor mean = hf.mean(1);
  const at::Tensor centered = hf - mean.unsqueeze(1);
  const at::Tensor rstd = centered.square().mean(1).add_(eps).rsqrt_();
  const at::Tensor y = (centered * rstd.unsqueeze(1) * weight + bias).to(out_dtype);
  return {h, y, mean, rstd};
}

// The backward kernels' math: with xhat = (h - mean) * rstd and g = dy * weight,
//   dh = d_new_residual + rstd * (g - mean(g) - xhat * mean(g * xhat))   (means over C)
//   dweight = sum over rows of dy * xhat, dbias = sum over rows of dy;
// {dh, dweight, dbias, d x_bias = sum over rows of dh (in h's dtype, added in float)}.
std::vector<at::Tensor> backward_stage_cpu(const at::Tensor& dy, const at::Tensor& d_new_residual,
                                           const at::Tensor& h, const at::Tensor& weight,
                                           const at::Tensor& mean, const at::Tensor& rstd,
                                           bool x_bias_grad) {
  const at::ScalarType acc = weight.scalar_type();
  const at::Tensor dyf = dy.to(acc);
  const at::Tensor xhat = (h.to(acc) - mean.unsqueeze(1)) * rstd.unsqueeze(1);
  const at::Tensor g = dyf * weight;
  at::Tensor dh = (g - g.mean(1, true) - xhat * (g * xhat).mean(1, true)) * rstd.unsqueeze(1);
  if (d_new_residual.defined()) dh.add_(d_new_residual.to(acc));
  const at::Tensor dh_out = dh.to(h.scalar_type());
  return {dh_out, (dyf * xhat).sum(0), dyf.sum(0),
          x_bias_grad ? dh_out.to(acc).sum(0) : at::Tensor()};
}

class ResidualLayerNormFunction : public torch::autograd::Function<ResidualLayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& residual,
                               const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, double eps, at::ScalarType out_dtype,
                               const at::Tensor& x_bias_or_empty) {
    // An undefined tensor cannot be a Function's input, so "no x_bias" comes as a 0-element one.
    const at::Tensor x_bias = x_bias_or_empty.numel() > 0 ? x_bias_or_empty : at::Tensor();
    const std::vector<at::Tensor> out =
        residual.is_cuda() ? detail::residual_layernorm_forward_cuda(residual, x, weight, bias, eps,
                                                                     out_dtype, x_bias)
                           : forward_stage_cpu(residual, x, weight, bias, eps, out_dtype, x_bias);
    ctx->save_for_backward({out[0], weight, out[2], out[3]});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["x_bias"] = x_bias.defined();
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined (zero)
    return {out[0], out[1]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const bool x_bias = ctx->saved_data["x_bias"].toBool();
    const at::Tensor& d_new_residual = grads[0];
    const at::Tensor& dy = grads[1];
    if (!dy.defined()) {  // y unused: the residual's gradient passes through the add
      if (!d_new_residual.defined()) return {{}, {}, {}, {}, {}, {}, {}};
      const at::Tensor d_x_bias =
          x_bias ? d_new_residual.to(saved[1].scalar_type()).sum(0) : at::Tensor();
      return {d_new_residual, d_new_residual.to(x_dtype), {}, {}, {}, {}, d_x_bias};
    }
    const at::Tensor dn = d_new_residual.defined() ? d_new_residual.contiguous() : at::Tensor();
    std::vector<at::Tensor> g;
    if (saved[0].is_cuda()) {
      g = detail::residual_layernorm_backward_cuda(dy.contiguous(), dn, saved[0], saved[1],
                                                   saved[2], saved[3], x_dtype, x_bias);
    } else {  // reordered as the kernels' launcher returns them
      g = backward_stage_cpu(dy, dn, saved[0], saved[1], saved[2], saved[3], x_bias);
      g.insert(g.begin() + 3, g[0].to(x_dtype));
    }
    // With one dtype d(residual) and d(x) are the same tensor, as for any add (PyTorch's
    // AddBackward does too); a narrower x gets d(residual) rounded to its dtype.
    return {g[0], g[3], g[1], g[2], {}, {}, g[4]};
  }
};

}  // namespace

std::tuple<at::Tensor, at::Tensor> residual_layernorm_reference(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias) {
  check_args(residual, x, weight, bias, out_dtype, x_bias);
  // Rounded once to residual's dtype: `residual + x` promotes and rounds so; with x_bias the sum
  // in float, then the rounding.
  const at::ScalarType acc = weight.scalar_type();
  const at::Tensor h = x_bias.defined()
                           ? (residual.to(acc) + (x.to(acc) + x_bias)).to(residual.scalar_type())
                           : residual + x;
  const at::Tensor y =
      at::layer_norm(h.to(weight.scalar_type()), {h.size(1)}, weight, bias, eps).to(out_dtype);
  return {h, y};
}

namespace detail {

std::tuple<at::Tensor, at::Tensor> residual_layernorm_function(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias) {
  check_args(residual, x, weight, bias, out_dtype, x_bias);
  const variable_list out = ResidualLayerNormFunction::apply(
      residual.contiguous(), x.contiguous(), weight.contiguous(), bias.contiguous(), eps, out_dtype,
      x_bias.defined() ? x_bias.contiguous() : at::empty({0}, weight.options()));
  return {out[0], out[1]};
}

}  // namespace detail

std::tuple<at::Tensor, at::Tensor> residual_layernorm(const at::Tensor& residual,
                                                      const at::Tensor& x, const at::Tensor& weight,
                                                      const at::Tensor& bias, double eps,
                                                      at::ScalarType out_dtype,
                                                      const at::Tensor& x_bias) {
  if (residual.is_cuda() && detail::residual_layernorm_cuda_built()) {
    return detail::residual_layernorm_function(residual, x, weight, bias, eps, out_dtype, x_bias);
  }
  return residual_layernorm_reference(residual, x, weight, bias, eps, out_dtype, x_bias);
}

}  // namespace brrr
