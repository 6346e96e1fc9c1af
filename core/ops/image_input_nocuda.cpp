// image_input without CUDA: the reference is the only path.
#include "core/error.h"
#include "core/ops/image_input.h"

namespace brrr::detail {

at::Tensor image_input_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType,
                            at::MemoryFormat) {
  throw Error("image_input: this brrr was built without CUDA");
}

bool image_input_cuda_built() {
  return false;
}

}  // namespace brrr::detail
