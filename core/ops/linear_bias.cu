// column_sum's CUDA kernel (see linear_bias.h for the op and the launch shape).
//
// Grid: x over slabs of 32 * kV columns, y over chunks of rows, sized so that about 4 blocks an
// SM run at once (a GPT-2 bias gradient, 16384 x 768 bf16: 3 slabs x 176 chunks of 94 rows).
// Bound by memory: the gradient is read once with 16-byte loads; the partials (chunks x C floats)
// are a few hundred KB.
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "core/ops/kernel_utils.cuh"
#include "core/ops/linear_bias.h"

namespace brrr::detail {

namespace {

constexpr int kWarps = 8;

// T: the gradient's dtype, kV: columns a lane (kVec16<T>, or 1 on the scalar path).
template <typename T, int kV>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    column_partials_kernel(const T* __restrict__ t,            // (N, C)
                           acc_type<T>* __restrict__ partial,  // (gridDim.y, C)
                           int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  using acc_t = acc_type<T>;
  __shared__ acc_t warp_sums[kWarps][kWarpSize * kV];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kWarpSize + lane) * kV;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = std::min(rows, begin + rows_per_chunk);
  acc_t acc[kV];
#pragma unroll
  for (int k = 0; k < kV; ++k) acc[k] = 0;
  if (col < cols) {  // cols % kV == 0 on the vector path: the lane's kV columns all exist
#pragma unroll 4
    for (int64_t r = begin + warp; r < end; r += kWarps) {
      const Vec<T, kV> v = load_vec<T, kV>(t + r * cols + col);
#pragma unroll
      for (int k = 0; k < kV; ++k) acc[k] += static_cast<acc_t>(v.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kV; ++k) warp_sums[warp][lane * kV + k] = acc[k];
  __syncthreads();
  // The block's warps added in warp order, one thread a column of the slab.
  for (int i = threadIdx.x; i < kWarpSize * kV; i += kWarps * kWarpSize) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpSize * kV + i;
    if (c >= cols) continue;
    acc_t s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += warp_sums[w][i];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
  }
}

}  // namespace

at::Tensor column_sum_cuda(const at::Tensor& t) {
  const c10::cuda::CUDAGuard guard(t.device());
  const int64_t rows = t.size(0), cols = t.size(1);
  at::Tensor out = at::empty({cols}, t.options());
  if (cols == 0) return out;
  if (rows == 0) return out.zero_();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "column_sum", [&] {
    using T = scalar_t;
    using acc_t = acc_type<T>;
    auto launch = [&](auto kernel, int vec) {
      const int64_t slabs = (cols + int64_t{kWarpSize} * vec - 1) / (int64_t{kWarpSize} * vec);
      // About 4 blocks an SM in all, at least 8 rows (one a warp) a chunk.
      const int64_t want_chunks = std::max<int64_t>(1, 4 * sms / slabs);
      const int64_t per_chunk = std::max<int64_t>(kWarps, (rows + want_chunks - 1) / want_chunks);
      const int64_t chunks = std::min<int64_t>((rows + per_chunk - 1) / per_chunk, 65535);
      const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
      at::Tensor partial =
          at::empty({chunks, cols}, t.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      kernel<<<dim3(static_cast<unsigned>(slabs), static_cast<unsigned>(chunks)),
               kWarps * kWarpSize, 0, stream>>>(t.data_ptr<T>(), partial.data_ptr<acc_t>(), rows,
                                                cols, rows_per_chunk);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      launch_sum_partials(partial.data_ptr<acc_t>(), out.data_ptr<T>(), chunks, cols, cols, stream);
    };
    if (cols % kVec16<T> == 0 && is_aligned(t.data_ptr(), 16)) {
      launch(column_partials_kernel<T, kVec16<T>>, kVec16<T>);
    } else {
      launch(column_partials_kernel<T, 1>, 1);
    }
  });
  return out;
}

bool linear_bias_cuda_built() {
  return true;
}

}  // namespace brrr::detail
