#include "trainer/optim/adam.h"

#include <cmath>

#include "core/error.h"

namespace brrr {
Adam::Adam(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr,
           AdamOptions options, bool fused, c10::Device device)
    : Optimizer(std::move(groups), std::move(names), lr, fused, device), options_(options) {
  if (!(options_.beta1 >= 0.0 && options_.beta1 < 1.0) ||
      !(options_.beta2 >= 0.0 && options_.beta2 < 1.0)) {
    throw ConfigError(
        fmt::format("optim.betas must be in [0, 1), got [{}, {}]", options_.beta1, options_.beta2));
  }
  if (!(options_.eps >= 0.0)) {
    throw ConfigError(fmt::format("optim.eps must be >= 0, got {}", options_.eps));
  }
}

void Adam::step(const at::Tensor* grad_scale, const at::Tensor* found_inf) {
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

void Adam::init_state(const std::vector<size_t>& indices) {
  for (size_t index : indices) {
    ParamState& s = state_[index];
    if (s.step.defined()) continue;
    const at::Tensor& p = parameters_at(index);
    s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
    s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
    s.step = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(step_device()));
  }
}

// As torch.optim.adam._fused_adam: steps advance before the kernel and are taken back by
// found_inf after it, all on the device.
void Adam::step_fused(size_t group, const at::Tensor* grad_scale, const at::Tensor* found_inf) {
  GroupGrads gg = collect(group);
  if (gg.params.empty()) return;
  init_state(gg.indices);
  std::vector<at::Tensor> exp_avgs, exp_avg_sqs, steps;
  for (size_t index : gg.indices) {
    exp_avgs.push_back(state_[index].exp_avg);
    exp_avg_sqs.push_back(state_[index].exp_avg_sq);
    steps.push_back(state_[index].step);
  }
  at::_foreach_add_(steps, 1);
  const ParamGroup& g = groups_[group];
  const at::Tensor lr = group_lr(group);  // on the device: no host value baked into the step
  const auto scale = optional_tensor(grad_scale);
  const auto inf = optional_tensor(found_inf);
  if (options_.decoupled_weight_decay) {
    at::_fused_adamw_(gg.params, gg.grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                      options_.beta1, options_.beta2, g.weight_decay, options_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, scale, inf);
  } else {
    at::_fused_adam_(gg.params, gg.grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                     options_.beta1, options_.beta2, g.weight_decay, options_.eps,
                     /*amsgrad=*/false, /*maximize=*/false, scale, inf);
  }
  if (found_inf != nullptr) {
    at::_foreach_sub_(steps, std::vector<at::Tensor>(steps.size(), *found_inf));
  }
}

// The op sequence of torch.optim.adam._multi_tensor_adam (capturable=False): steps live on the
// CPU, so the bias corrections are host doubles and reading them costs no device sync.
void Adam::step_foreach(size_t group, const at::Tensor* grad_scale) {
  GroupGrads gg = collect(group);
  if (gg.params.empty()) return;
  init_state(gg.indices);
  std::vector<at::Tensor> exp_avgs, exp_avg_sqs, steps;
  for (size_t index : gg.indices) {
    exp_avgs.push_back(state_[index].exp_avg);
    exp_avg_sqs.push_back(state_[index].exp_avg_sq);
    steps.push_back(state_[index].step);
  }
  const ParamGroup& g = groups_[group];
  const double lr = lr_ * g.lr_scale;
  const double beta1 = options_.beta1;
  const double beta2 = options_.beta2;

  std::vector<at::Tensor> grads = gg.grads;
  if (grad_scale != nullptr) grads = at::_foreach_div(grads, *grad_scale);
  at::_foreach_add_(steps, 1);
  if (g.weight_decay != 0.0) {
    if (options_.decoupled_weight_decay) {
      at::_foreach_mul_(gg.params, 1.0 - lr * g.weight_decay);
    } else {
      grads = at::_foreach_add(grads, gg.params, g.weight_decay);
    }
  }
  at::_foreach_lerp_(exp_avgs, grads, 1.0 - beta1);
  at::_foreach_mul_(exp_avg_sqs, beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2);

  std::vector<at::Scalar> step_size, bias_correction2_sqrt;
  for (const at::Tensor& step : steps) {
    const double t = step.item<float>();
    step_size.emplace_back(-(lr / (1.0 - std::pow(beta1, t))));
    bias_correction2_sqrt.emplace_back(std::pow(1.0 - std::pow(beta2, t), 0.5));
  }
  std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);  // sqrt(v)
  at::_foreach_div_(denom, bias_correction2_sqrt);
  at::_foreach_add_(denom, options_.eps);
  at::_foreach_addcdiv_(gg.params, exp_avgs, denom, step_size);
}

}  // namespace brrr
