// bias_gelu without CUDA: the reference is the only path of bias_gelu(); the Function's CPU
// stages still run (detail::bias_gelu_function).
#include "core/error.h"
#include "core/ops/bias_gelu.h"

namespace brrr::detail {

at::Tensor bias_gelu_forward_cuda(const at::Tensor&, const at::Tensor&) {
  throw Error("bias_gelu: this brrr was built without CUDA");
}

std::vector<at::Tensor> bias_gelu_backward_cuda(const at::Tensor&, const at::Tensor&,
                                                const at::Tensor&) {
  throw Error("bias_gelu: this brrr was built without CUDA");
}

bool bias_gelu_cuda_built() {
  return false;
}

}  // namespace brrr::detail
