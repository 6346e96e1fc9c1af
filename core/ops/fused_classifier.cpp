#include "core/ops/fused_classifier.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/autocast_mode.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/op_dtypes.h"

namespace brrr {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// targets: int64 (rows,) on `device`; `input` names the tensor the rows come from.
void check_targets(const at::Tensor& targets, int64_t rows, const at::Device& device,
                   const std::string& op, const std::string& input) {
  if (targets.scalar_type() != at::kLong || targets.dim() != 1 || targets.size(0) != rows ||
      targets.device() != device) {
    throw DataError(fmt::format("{}: targets must be int64 ({},) on {} for {}, got {} [{}] on {}",
                                op, rows, device.str(), input, c10::toString(targets.scalar_type()),
                                fmt::join(targets.sizes(), ", "), targets.device().str()));
  }
}

void check_args(const at::Tensor& logits, const at::Tensor& targets) {
  const at::ScalarType dtype = logits.scalar_type();
  if (logits.dim() != 2 || logits.size(1) == 0) {
    throw DataError(fmt::format("fused_classifier: logits must be (N, V) with V > 0, got {} [{}]",
                                c10::toString(dtype), fmt::join(logits.sizes(), ", ")));
  }
  if (!detail::is_kernel_float(dtype)) {
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
  check_targets(targets, logits.size(0), logits.device(), "fused_classifier",
                fmt::format("logits [{}]", fmt::join(logits.sizes(), ", ")));
}

void check_head_args(const at::Tensor& hidden, const at::Tensor& weight,
                     const at::Tensor& targets) {
  const bool shapes_ok = hidden.dim() == 2 && weight.dim() == 2 &&
                         hidden.size(1) == weight.size(1) && weight.size(0) > 0;
  const bool same = hidden.scalar_type() == weight.scalar_type() &&
                    hidden.device() == weight.device() &&
                    detail::is_kernel_float(hidden.scalar_type());
  if (!shapes_ok || !same) {
    throw DataError(fmt::format(
        "lm_head_loss: expected hidden (N, C) and weight (V, C), V > 0, of one dtype among "
        "float32, float64, bfloat16, float16 on one device, got hidden {} [{}] on {}, weight {} "
        "[{}] on {}",
        c10::toString(hidden.scalar_type()), fmt::join(hidden.sizes(), ", "), hidden.device().str(),
        c10::toString(weight.scalar_type()), fmt::join(weight.sizes(), ", "),
        weight.device().str()));
  }
  check_targets(targets, hidden.size(0), hidden.device(), "lm_head_loss",
                fmt::format("hidden [{}]", fmt::join(hidden.sizes(), ", ")));
}

void check_chunk_rows(int64_t chunk_rows) {
  if (chunk_rows < 0) {
    throw DataError(fmt::format(
        "lm_head_loss: chunk_rows must be >= 0 (0: all rows at once), got {}", chunk_rows));
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

// The forward-with-gradient kernel's math in ATen ops: row_loss, and logits <- softmax - onehot.
at::Tensor forward_grad_stage_cpu(const at::Tensor& logits, const at::Tensor& targets,
                                  int64_t ignore_index) {
  const std::vector<at::Tensor> stage = forward_stage_cpu(logits, targets, ignore_index);
  const at::Tensor one = at::ones({}, stage[1].options());
  backward_stage_cpu(logits, targets, stage[1], one, one, ignore_index);
  return stage[0];
}

// t *= scale in the accumulator type, rounded once (scale_cuda_ on the GPU).
void scale_(const at::Tensor& t, const at::Tensor& scale) {
  if (t.is_cuda()) {
    detail::scale_cuda_(t, scale);
  } else {
    t.copy_(t.to(scale.scalar_type()).mul_(scale));
  }
}

// acc (+)= a b: a and b in the op's dtype, acc (rows, cols) in its accumulator type, products
// summed in that type and acc rounded once per call. `first` overwrites acc instead.
void mm_accumulate(at::Tensor& acc, const at::Tensor& a, const at::Tensor& b, bool first) {
  const at::ScalarType type = acc.scalar_type();
  if (a.scalar_type() == type) {
    if (first) {
      at::mm_out(acc, a, b);
    } else {
      acc.addmm_(a, b);
    }
  } else if (acc.is_cuda()) {  // cuBLAS: half/bf16 inputs, float output, beta 1
    if (first) {
      at::mm_out(acc, a, b, type);
    } else {
      at::addmm_out(acc, acc, a, b, type);
    }
  } else {  // the CPU has no mixed-dtype GEMM: the same sums from the inputs cast up
    const at::Tensor product = a.to(type).mm(b.to(type));
    if (first) {
      acc.copy_(product);
    } else {
      acc.add_(product);
    }
  }
}

class LmHeadLossFunction : public torch::autograd::Function<LmHeadLossFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& targets,
                            int64_t ignore_index, bool with_grad, bool hidden_is_scratch,
                            int64_t chunk_rows) {
    const int64_t rows = hidden.size(0);
    const at::ScalarType acc = at::toOpMathType(hidden.scalar_type());
    const at::Tensor n_valid = targets.ne(ignore_index).sum().to(acc);  // on the device
    ctx->saved_data["hidden_is_scratch"] = hidden_is_scratch;
    ctx->saved_data["consumed"] = false;
    const bool chunked = chunk_rows > 0 && chunk_rows < rows;
    ctx->saved_data["chunked"] = with_grad && chunked;
    if (!chunked) {
      at::Tensor logits = at::mm(hidden, weight.t());  // (N, V)
      if (!with_grad) return loss_of(logits, targets, ignore_index).sum().div_(n_valid);
      const at::Tensor row_loss =
          logits.is_cuda()
              ? detail::fused_classifier_forward_grad_cuda(logits, targets, ignore_index)
              : forward_grad_stage_cpu(logits, targets, ignore_index);
      ctx->save_for_backward({hidden, weight, logits, n_valid});
      return row_loss.sum().div_(n_valid);
    }
    // Chunked: one (chunk_rows, V) logits buffer, reused; each chunk's gradients are taken
    // now, unscaled, into d W (accumulator type) and d hidden (hidden's buffer when scratch),
    // each only where its input needs it (a frozen head or frozen hidden states).
    at::Tensor buffer = at::empty({chunk_rows, weight.size(0)}, hidden.options());
    const bool need_d_hidden = with_grad && ctx->needs_input_grad(0);
    const bool need_d_weight = with_grad && ctx->needs_input_grad(1);
    at::Tensor d_weight, d_hidden;
    if (need_d_weight) d_weight = at::empty(weight.sizes(), weight.options().dtype(acc));
    if (need_d_hidden) d_hidden = hidden_is_scratch ? hidden : at::empty_like(hidden);
    std::vector<at::Tensor> row_losses;
    for (int64_t first = 0; first < rows; first += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - first);
      at::Tensor logits = buffer.narrow(0, 0, n);  // leading rows: contiguous
      const at::Tensor h = hidden.narrow(0, first, n);
      const at::Tensor t = targets.narrow(0, first, n);
      at::mm_out(logits, h, weight.t());
      if (!with_grad) {
        row_losses.push_back(loss_of(logits, t, ignore_index));
        continue;
      }
      row_losses.push_back(logits.is_cuda()
                               ? detail::fused_classifier_forward_grad_cuda(logits, t, ignore_index)
                               : forward_grad_stage_cpu(logits, t, ignore_index));
      // d W first: it is this chunk of hidden's last reader, so d hidden may take its rows.
      if (need_d_weight) mm_accumulate(d_weight, logits.t(), h, /*first=*/first == 0);
      if (need_d_hidden) {
        at::Tensor d_h = d_hidden.narrow(0, first, n);
        at::mm_out(d_h, logits, weight);
      }
    }
    const at::Tensor loss = at::cat(row_losses).sum().div_(n_valid);
    if (with_grad) {
      // hidden's buffer now holds d hidden: a node that saved hidden and runs later fails on
      // the version check instead of reading it.
      if (need_d_hidden && hidden_is_scratch) torch::autograd::impl::bump_version(d_hidden);
      ctx->saved_data["dtype"] = static_cast<int64_t>(hidden.scalar_type());
      ctx->save_for_backward({d_hidden, d_weight, n_valid});
    }
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // Before unpacking: hidden's version check would throw a less telling error.
    const bool scratch = ctx->saved_data["hidden_is_scratch"].toBool();
    if (scratch && ctx->saved_data["consumed"].toBool()) {
      throw Error(
          "lm_head_loss: backward ran twice through one graph; the first one overwrote hidden "
          "with its gradient (hidden_is_scratch; retain_graph=True needs it false)");
    }
    const variable_list saved = ctx->get_saved_variables();
    if (ctx->saved_data["chunked"].toBool()) return chunked_backward(ctx, saved, grads[0]);
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& g = saved[2];  // softmax - onehot, unscaled
    const at::Tensor scale = grads[0].to(saved[3].scalar_type()).div(saved[3]);
    at::Tensor d_hidden, d_weight;
    // d W first: it is hidden's last reader, so that d hidden may take hidden's buffer.
    if (ctx->needs_input_grad(1)) {
      d_weight = g.t().mm(hidden);  // (V, C), in weight's layout
      scale_(d_weight, scale);
    }
    if (ctx->needs_input_grad(0)) {
      if (scratch) {
        ctx->saved_data["consumed"] = true;
        d_hidden = hidden;
        at::mm_out(d_hidden, g, weight);
        // A node that saved hidden too and runs later fails on the version check.
        torch::autograd::impl::bump_version(d_hidden);
      } else {
        d_hidden = g.mm(weight);
      }
      scale_(d_hidden, scale);
    }
    return {d_hidden,     d_weight,     at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }

 private:
  // The forward without gradients: row_loss of logits (N, V).
  static at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index) {
    return logits.is_cuda()
               ? detail::fused_classifier_forward_cuda(logits, targets, ignore_index)[0]
               : forward_stage_cpu(logits, targets, ignore_index)[0];
  }

  // saved: d hidden (hidden's dtype), d W (accumulator type), n_valid; both unscaled. The
  // scale is applied now, rounding each once into the inputs' dtype.
  static variable_list chunked_backward(AutogradContext* ctx, const variable_list& saved,
                                        const at::Tensor& grad_output) {
    const at::Tensor& d_hidden_unscaled = saved[0];
    const at::Tensor& d_weight_acc = saved[1];
    const at::Tensor scale = grad_output.to(saved[2].scalar_type()).div(saved[2]);
    at::Tensor d_hidden, d_weight;
    if (ctx->needs_input_grad(1)) {
      // The Function's weight input: its dtype is hidden's (checked).
      const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
      d_weight = at::empty(d_weight_acc.sizes(), d_weight_acc.options().dtype(dtype));
      at::mul_out(d_weight, d_weight_acc, scale);  // in the accumulator type, rounded once
    }
    if (ctx->needs_input_grad(0)) {
      if (ctx->saved_data["hidden_is_scratch"].toBool()) {
        ctx->saved_data["consumed"] = true;
        d_hidden = d_hidden_unscaled;
        scale_(d_hidden, scale);
      } else {  // kept unscaled: a second backward (retain_graph) reads it again
        d_hidden = d_hidden_unscaled.clone();
        scale_(d_hidden, scale);
      }
    }
    return {d_hidden,     d_weight,     at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
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

at::Tensor lm_head_loss_reference(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t ignore_index) {
  check_head_args(hidden, weight, targets);
  return fused_classifier_reference(at::linear(hidden, weight), targets, ignore_index);
}

namespace detail {

at::Tensor lm_head_loss_function(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t ignore_index,
                                 bool hidden_is_scratch, int64_t chunk_rows) {
  check_head_args(hidden, weight, targets);
  check_chunk_rows(chunk_rows);
  const bool with_grad =
      at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  // Scratch only when hidden is its own contiguous buffer: a copy made here is scratch anyway.
  return LmHeadLossFunction::apply(hidden.contiguous(), weight.contiguous(), targets.contiguous(),
                                   ignore_index, with_grad, hidden_is_scratch, chunk_rows);
}

}  // namespace detail

at::Tensor lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight,
                        const at::Tensor& targets, int64_t ignore_index, bool hidden_is_scratch,
                        int64_t chunk_rows) {
  check_chunk_rows(chunk_rows);
  if (!(hidden.is_cuda() && detail::fused_classifier_cuda_built())) {
    return lm_head_loss_reference(hidden, weight, targets, ignore_index);
  }
  // A custom Function is invisible to autocast: cast as autocast casts at::linear's arguments.
  const c10::DeviceType type = hidden.device().type();
  if (at::autocast::is_autocast_enabled(type)) {
    const at::ScalarType dtype = at::autocast::get_autocast_dtype(type);
    return detail::lm_head_loss_function(at::autocast::cached_cast(dtype, hidden, type),
                                         at::autocast::cached_cast(dtype, weight, type), targets,
                                         ignore_index, hidden_is_scratch, chunk_rows);
  }
  return detail::lm_head_loss_function(hidden, weight, targets, ignore_index, hidden_is_scratch,
                                       chunk_rows);
}

}  // namespace brrr
