#pragma once
// SGD with momentum (dampening 0), optional Nesterov and L2 weight decay, as torch.optim.SGD:
//   g = grad + wd * p;  buf = momentum * buf + g (buf = g at the first step);
//   d = nesterov ? g + momentum * buf : buf;  p -= lr * d
#include "trainer/optim/optimizer.h"

namespace brrr {

struct SgdOptions {
  double momentum = 0.0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  /// Throws ConfigError for momentum < 0 or nesterov without momentum.
  Sgd(std::vector<ParamGroup> groups, std::vector<std::string> names, double lr, SgdOptions options,
      bool fused, c10::Device device);

  void step(const at::Tensor* grad_scale = nullptr, const at::Tensor* found_inf = nullptr) override;
  std::string name() const override { return "sgd"; }

 private:
  void step_fused(size_t group, const at::Tensor* grad_scale, const at::Tensor* found_inf);
  void step_foreach(size_t group, const at::Tensor* grad_scale);

  SgdOptions options_;
};

}  // namespace brrr
