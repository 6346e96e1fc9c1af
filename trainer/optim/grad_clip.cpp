#include "trainer/optim/grad_clip.h"

#include <map>
#include <string>

#include "core/error.h"

namespace brrr {
namespace {

/// Defined gradients grouped by dtype (_foreach_norm / _foreach_mul_ take one dtype per call).
std::map<at::ScalarType, std::vector<at::Tensor>> grads_by_dtype(
    const std::vector<at::Tensor>& params) {
  std::map<at::ScalarType, std::vector<at::Tensor>> out;
  for (const at::Tensor& p : params) {
    const at::Tensor& grad = p.grad();
    if (grad.defined()) out[grad.scalar_type()].push_back(grad.detach());
  }
  return out;
}

at::Tensor norm_of(const std::map<at::ScalarType, std::vector<at::Tensor>>& groups) {
  if (groups.empty()) return at::zeros({}, at::kFloat);
  std::vector<at::Tensor> norms;
  for (const auto& [dtype, grads] : groups) {
    std::vector<at::Tensor> group_norms = at::_foreach_norm(grads, 2);
    norms.insert(norms.end(), group_norms.begin(), group_norms.end());
  }
  return at::linalg_vector_norm(at::stack(norms), 2);
}

}  // namespace

at::Tensor total_grad_norm(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  return norm_of(grads_by_dtype(params));
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  if (!(max_norm > 0.0)) {
    throw Error(fmt::format("clip_grad_norm: max_norm must be > 0, got {}", max_norm));
  }
  at::NoGradGuard no_grad;
  const auto groups = grads_by_dtype(params);
  at::Tensor total = norm_of(groups);
  if (groups.empty()) return total;
  // Same arithmetic as torch: coef = max_norm / (norm + 1e-6), clamped to 1 (never scales up).
  const at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (const auto& [dtype, grads] : groups) at::_foreach_mul_(grads, coef);
  return total;
}

}  // namespace brrr
