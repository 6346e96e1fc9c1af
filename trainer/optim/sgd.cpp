#include "trainer/optim/sgd.h"

#include "core/error.h"

namespace brrr {
Sgd::Sgd(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr,
         SgdOptions options, bool fused, c10::Device device)
    : Optimizer(std::move(groups), std::move(names), lr, fused, device), options_(options) {
  if (!(options_.momentum >= 0.0)) {
    throw ConfigError(fmt::format("optim.momentum must be >= 0, got {}", options_.momentum));
  }
  if (options_.nesterov && options_.momentum == 0.0) {
    throw ConfigError("optim.nesterov: Nesterov momentum needs optim.momentum > 0");
  }
}

void Sgd::step(const at::Tensor* grad_scale, const at::Tensor* found_inf) {
  at::NoGradGuard no_grad;
  if (!fused_ && host_found_inf(found_inf)) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (fused_) {
      step_fused(g, grad_scale, found_inf);
    } else {
      step_foreach(g, grad_scale);
    }
  }
}

// Momentum buffers start at zero instead of torch's "buf = grad at the first step": with
// dampening 0, momentum * 0 + grad == grad bit for bit, and a zero buffer stays valid when the
// first step is skipped on the device by found_inf (an uninitialised one would not).
void Sgd::step_fused(size_t group, const at::Tensor* grad_scale, const at::Tensor* found_inf) {
  GroupGrads gg = collect(group);
  if (gg.params.empty()) return;
  std::vector<at::Tensor> bufs;
  if (options_.momentum != 0.0) {
    for (size_t index : gg.indices) {
      at::Tensor& buf = state_[index].momentum_buffer;
      if (!buf.defined()) buf = at::zeros_like(gg.params[bufs.size()], at::MemoryFormat::Preserve);
      bufs.push_back(buf);
    }
  }
  const ParamGroup& g = groups_[group];
  at::_fused_sgd_(gg.params, gg.grads, bufs, g.weight_decay, options_.momentum, group_lr(group),
                  /*dampening=*/0.0, options_.nesterov, /*maximize=*/false,
                  /*is_first_step=*/false, optional_tensor(grad_scale), optional_tensor(found_inf));
}

// The op sequence of torch.optim.sgd._multi_tensor_sgd, except that gradients are never
// modified in place (Nesterov adds out of place).
void Sgd::step_foreach(size_t group, const at::Tensor* grad_scale) {
  GroupGrads gg = collect(group);
  if (gg.params.empty()) return;
  const ParamGroup& g = groups_[group];
  std::vector<at::Tensor> grads = gg.grads;
  if (grad_scale != nullptr) grads = at::_foreach_div(grads, *grad_scale);
  if (g.weight_decay != 0.0) grads = at::_foreach_add(grads, gg.params, g.weight_decay);
  if (options_.momentum != 0.0) {
    std::vector<at::Tensor> bufs;
    for (size_t index : gg.indices) {
      at::Tensor& buf = state_[index].momentum_buffer;
      if (!buf.defined()) buf = at::zeros_like(gg.params[bufs.size()], at::MemoryFormat::Preserve);
      bufs.push_back(buf);
    }
    at::_foreach_mul_(bufs, options_.momentum);
    at::_foreach_add_(bufs, grads, /*alpha=*/1.0);
    if (options_.nesterov) {
      grads = at::_foreach_add(grads, bufs, options_.momentum);
    } else {
      grads = bufs;
    }
  }
  at::_foreach_add_(gg.params, grads, -(lr_ * g.lr_scale));
}

}  // namespace brrr
