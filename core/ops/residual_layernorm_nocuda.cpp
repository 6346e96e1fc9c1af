// residual_layernorm without CUDA: the reference is the only path of residual_layernorm(); the
// Function's CPU stages still run (detail::residual_layernorm_function).
#include "core/error.h"
#include "core/ops/residual_layernorm.h"

namespace brrr::detail {

std::vector<at::Tensor> residual_layernorm_forward_cuda(const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&,
                                                        double, at::ScalarType, const at::Tensor&,
                                                        bool) {
  throw Error("residual_layernorm: this brrr was built without CUDA");
}

std::vector<at::Tensor> residual_layernorm_backward_cuda(const at::Tensor&, const at::Tensor&,
                                                         const at::Tensor&, const at::Tensor&,
                                                         const at::Tensor&, const at::Tensor&,
                                                         at::ScalarType, bool, bool) {
  throw Error("residual_layernorm: this brrr was built without CUDA");
}

bool residual_layernorm_cuda_built() {
  return false;
}

}  // namespace brrr::detail
