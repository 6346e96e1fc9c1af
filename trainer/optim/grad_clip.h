#pragma once
// Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ (foreach, L2), without any
// host-device synchronisation: the norm stays a device tensor that the trainer reads only on
// logging steps.
#include <ATen/core/Tensor.h>

#include <vector>

namespace brrr {

/// L2 norm over all defined gradients of `params` (one _foreach_norm per dtype + one stack/norm):
/// a 0-dim tensor on the gradients' device; 0 on the CPU when no parameter has a gradient.
at::Tensor total_grad_norm(const std::vector<at::Tensor>& params);

/// Scales every defined gradient by min(1, max_norm / (norm + 1e-6)) in place and returns the
/// norm before clipping (0-dim, on the device). Throws Error when max_norm <= 0.
/// A non-finite norm (inf/NaN gradients, e.g. an overflowing fp16 step) turns the gradients into
/// NaN/0 but never touches the parameters: such a step is skipped by the GradScaler's found_inf
/// and the gradients are dropped by the next zero_grad().
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace brrr
