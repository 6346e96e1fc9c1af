// linear_bias without CUDA: at::linear and at::sum are the only paths; the Function's CPU stages
// still run (detail::linear_bias_function).
#include "core/error.h"
#include "core/ops/linear_bias.h"

namespace brrr::detail {

at::Tensor column_sum_cuda(const at::Tensor&, bool) {
  throw Error("column_sum: this brrr was built without CUDA");
}

bool column_sum_takes_one_launch(const at::Tensor&) {
  return false;
}

bool linear_bias_cuda_built() {
  return false;
}

}  // namespace brrr::detail
