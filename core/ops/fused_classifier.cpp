#include "core/ops/fused_classifier.h"

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

void check_args(const at::Tensor& logits, const at::Tensor& targets) {
  const at::ScalarType dtype = logits.scalar_type();
  if (logits.dim() != 2 || logits.size(1) == 0) {
    throw DataError(fmt::format("fused_classifier: logits must be (N, V) with V > 0, got {} [{}]",
                                c10::toString(dtype), fmt::join(logits.sizes(), ", ")));
  }
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kHalf && dtype != at::kBFloat16) {
    throw DataError(
        fmt::format("fused_classifier: logits must be float32, float64, bfloat16 or "
                    "float16, got {} [{}]",
                    c10::toString(dtype), fmt::join(logits.sizes(), ", ")));
  }
  if (!logits.is_contiguous()) {  // the backward writes the gradient into this very buffer
    throw DataError(
        fmt::format("fused_classifier: logits must be contiguous, got sizes [{}] "
                    "strides [{}]",
                    fmt::join(logits.sizes(), ", "), fmt::join(logits.strides(), ", ")));
  }
  if (targets.scalar_type() != at::kLong || targets.dim() != 1 ||
      targets.size(0) != logits.size(0) || targets.device() != logits.device()) {
    throw DataError(fmt::format(
        "fused_classifier: targets must be int64 ({},) on {} for logits [{}], got {} [{}] on {}",
        logits.size(0), logits.device().str(), fmt::join(logits.sizes(), ", "),
        c10::toString(targets.scalar_type()), fmt::join(targets.sizes(), ", "),
        targets.device().str()));
  }
}

// The forward kernel's math in ATen ops (the Function's CPU stage): {row_loss, lse} in the
// accumulator type, row_loss 0 in ignored rows and NaN where the target is out of range.
std::vector<at::Tensor> forward_stage_cpu(const at::Tensor& logits, const at::Tensor& targets,
                                          int64_t ignore_index) {
  const int64_t vocab = logits.size(1);
  const at::Tensor x = logits.to(at::toOpMathType(logits.scalar_type()));
  const at::Tensor lse = x.logsumexp(1);
  const at::Tensor picked = x.gather(1, targets.clamp(0, vocab - 1).unsqueeze(1)).squeeze(1);
  const at::Tensor in_range = targets.ge(0).logical_and(targets.lt(vocab));
  const at::Tensor row_loss = (lse - picked)
                                  .masked_fill(in_range.logical_not(), NAN)
                                  .masked_fill(targets.eq(ignore_index), 0.0);
  return {row_loss, lse};
}

// The backward kernel's math in ATen ops: logits <- (softmax - onehot) * grad_output / n_valid.
void backward_stage_cpu(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                        const at::Tensor& grad_output, const at::Tensor& n_valid,
                        int64_t ignore_index) {
  const int64_t vocab = logits.size(1);
  const at::Tensor index = targets.clamp(0, vocab - 1).unsqueeze(1);
  at::Tensor grad = logits.to(lse.scalar_type()).sub(lse.unsqueeze(1)).exp_();
  grad.scatter_(1, index, grad.gather(1, index).sub_(1.0));
  grad.mul_(grad_output / n_valid);
  const at::Tensor in_range = targets.ge(0).logical_and(targets.lt(vocab));
  grad.masked_fill_(in_range.logical_not().unsqueeze(1), NAN);
  grad.masked_fill_(targets.eq(ignore_index).unsqueeze(1), 0.0);
  logits.copy_(grad);
}

class FusedClassifierFunction : public torch::autograd::Function<FusedClassifierFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, int64_t ignore_index) {
    const std::vector<at::Tensor> stage =
        logits.is_cuda() ? detail::fused_classifier_forward_cuda(logits, targets, ignore_index)
                         : forward_stage_cpu(logits, targets, ignore_index);
    const at::Tensor& row_loss = stage[0];
    const at::Tensor& lse = stage[1];
    // Counted on the device: reading it on the host would wait for the forward to finish.
    const at::Tensor n_valid = targets.ne(ignore_index).sum().to(lse.scalar_type());
    ctx->save_for_backward({logits, targets, lse, n_valid});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["consumed"] = false;
    return row_loss.sum().div_(n_valid);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // A second backward would read the gradient written by the first in place of the logits.
    if (ctx->saved_data["consumed"].toBool()) {
      throw Error(
          "fused_classifier: backward ran twice through one graph; the first one overwrote the "
          "saved logits with their gradient (retain_graph=True is not supported by this op)");
    }
    ctx->saved_data["consumed"] = true;
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& lse = saved[2];
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const at::Tensor grad_output = grads[0].to(lse.scalar_type());
    if (logits.is_cuda()) {
      detail::fused_classifier_backward_cuda(logits, saved[1], lse, grad_output, saved[3],
                                             ignore_index);
    } else {
      backward_stage_cpu(logits, saved[1], lse, grad_output, saved[3], ignore_index);
    }
    // The buffer now holds the gradient: a node that saved the logits and unpacks them later
    // fails on the version check instead of reading it.
    torch::autograd::impl::bump_version(logits);
    return {logits.detach(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_classifier_reference(const at::Tensor& logits, const at::Tensor& targets,
                                      int64_t ignore_index) {
  check_args(logits, targets);
  // log_softmax in float (float64 for float64 logits), as the kernel and autocast do.
  const at::Tensor logp = logits.to(at::toOpMathType(logits.scalar_type())).log_softmax(1);
  return at::nll_loss(logp, targets, {}, at::Reduction::Mean, ignore_index);
}

namespace detail {

at::Tensor fused_classifier_function(const at::Tensor& logits, const at::Tensor& targets,
                                     int64_t ignore_index) {
  check_args(logits, targets);
  return FusedClassifierFunction::apply(logits, targets.contiguous(), ignore_index);
}

}  // namespace detail

at::Tensor fused_classifier(const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index) {
  if (logits.is_cuda() && detail::fused_classifier_cuda_built()) {
    return detail::fused_classifier_function(logits, targets, ignore_index);
  }
  return fused_classifier_reference(logits, targets, ignore_index);
}

}  // namespace brrr
