#pragma once
// Adam (L2 weight decay added to the gradient) and AdamW (decoupled: p *= 1 - lr * wd), as
// torch.optim.Adam / AdamW without amsgrad:
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g^2;  t += 1
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#include "trainer/optim/optimizer.h"

namespace brrr {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// true = AdamW.
  bool decoupled_weight_decay = false;
};

class Adam : public Optimizer {
 public:
  /// Throws ConfigError for betas outside [0, 1) or eps < 0.
  Adam(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr,
       AdamOptions options, bool fused, c10::Device device);

  void step(const at::Tensor* grad_scale = nullptr, const at::Tensor* found_inf = nullptr) override;
  std::string name() const override { return options_.decoupled_weight_decay ? "adamw" : "adam"; }

 private:
  void init_state(const std::vector<size_t>& indices);
  void step_fused(size_t group, const at::Tensor* grad_scale, const at::Tensor* found_inf);
  void step_foreach(size_t group, const at::Tensor* grad_scale);

  AdamOptions options_;
};

}  // namespace brrr
