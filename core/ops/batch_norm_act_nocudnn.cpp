// batch_norm_act without cuDNN's headers (a CPU build, or CUDA without cuDNN): the reference is
// the only path.
#include "core/error.h"
#include "core/ops/batch_norm_act.h"

namespace brrr::detail {

bool batch_norm_act_cudnn_built() {
  return false;
}

std::vector<at::Tensor> batch_norm_act_forward_cudnn(const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, const at::Tensor&, double,
                                                     double) {
  throw Error("batch_norm_act: this brrr was built without cuDNN");
}

std::vector<at::Tensor> batch_norm_act_backward_cudnn(const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, const at::Tensor&, double,
                                                      bool) {
  throw Error("batch_norm_act: this brrr was built without cuDNN");
}

}  // namespace brrr::detail
