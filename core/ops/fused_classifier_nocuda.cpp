// fused_classifier without CUDA: the reference is the only path of fused_classifier(); the
// Function's CPU stage still runs (detail::fused_classifier_function).
#include "core/error.h"
#include "core/ops/fused_classifier.h"

namespace brrr::detail {

std::vector<at::Tensor> fused_classifier_forward_cuda(const at::Tensor&, const at::Tensor&,
                                                      int64_t) {
  throw Error("fused_classifier: this brrr was built without CUDA");
}

void fused_classifier_backward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const at::Tensor&, const at::Tensor&, int64_t) {
  throw Error("fused_classifier: this brrr was built without CUDA");
}

at::Tensor fused_classifier_forward_grad_cuda(const at::Tensor&, const at::Tensor&, int64_t) {
  throw Error("lm_head_loss: this brrr was built without CUDA");
}

void scale_cuda_(const at::Tensor&, const at::Tensor&) {
  throw Error("lm_head_loss: this brrr was built without CUDA");
}

bool fused_classifier_cuda_built() {
  return false;
}

}  // namespace brrr::detail
