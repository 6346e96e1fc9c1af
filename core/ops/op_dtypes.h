#pragma once
// What the ops' argument checks share: the dtypes their kernels dispatch over
// (AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16): float32, float64, bf16, fp16).
#include <c10/core/ScalarType.h>

namespace brrr::detail {

inline bool is_kernel_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

}  // namespace brrr::detail
