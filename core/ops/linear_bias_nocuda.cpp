// linear_bias without CUDA: at::linear and at::sum are the only paths; the Function's CPU stages
// still run (detail::linear_bias_function).
#include "core/error.h"
#include "core/ops/linear_bias.h"

namespace brrr::detail {

at::Tensor column_sum_cuda(const at::Tensor&) {
  throw Error("column_sum: this brrr was built without CUDA");
}

bool linear_bias_cuda_built() {
  return false;
}

}  // namespace brrr::detail
