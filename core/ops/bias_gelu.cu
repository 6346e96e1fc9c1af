// bias_gelu's CUDA kernels (see bias_gelu.h for the op).
//
// Launch shapes:
//   forward: 256 threads a block, one kV-element vector per thread per step, grid-stride over
//     the (N, D) tensor with at most 8 blocks per SM (2048 threads: a full SM) of work a wave.
//     Elementwise and bound by memory: x read once, y written once, bias from the cache.
//   backward: blocks of (kCols = 32, kRows = 8) threads; thread (tx, ty) owns the column vector
//     blockIdx.x * 32 + tx (a warp reads 32 consecutive vectors of one row: coalesced) and walks
//     the rows blockIdx.y * 8 + ty, + gridDim.y * 8, ..., keeping its columns' sums of dx in
//     registers. The block adds its 8 row lanes in order into row blockIdx.y of the partials
//     (gridDim.y, D); gridDim.y is chosen so the grid fills the device about once, and
//     sum_partials_kernel adds the partials' rows in order (deterministic: no atomics).
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/ops/bias_gelu.h"
#include "core/ops/kernel_utils.cuh"

namespace brrr::detail {

namespace {

constexpr int kThreads = 256;
constexpr int kCols = 32;
constexpr int kRows = 8;

// gelu_tanh(v) = 0.5 v (1 + tanh(u)), u = sqrt(2/pi) (v + 0.044715 v^3), computed as v * s with
// s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u): the same function, as 0.5 (1 + tanh(u)) =
// sigmoid(2u) exactly. In float that is one exp2 and one reciprocal (two MUFU instructions), where
// tanhf's ~20 instructions made the kernels bound by instruction issue, not memory: ~30
// instructions an element forward and ~60 backward (PTX of sm_90), 3 G lane instructions for the
// backward at GPT-2's c_fc, 0.09 ms of issue on an H200 of its 0.118 ms.
// No cancellation anywhere: s and v * s keep float's relative precision as e grows (e = inf gives
// s = 0, y = -0 where the exact value is below float's range), and 1 - s is taken as e * s where
// e < 1 (s near 1).
template <typename acc_t>
struct GeluTanh {
  static constexpr acc_t kSqrt2OverPi = acc_t(0.7978845608028654);
  static constexpr acc_t kCubic = acc_t(0.044715);
  static constexpr acc_t kLog2e = acc_t(1.4426950408889634);
  // e = exp(-2u) = 2^(v (kA + kB v^2)).
  static constexpr acc_t kA = acc_t(-2) * kSqrt2OverPi * kLog2e;
  static constexpr acc_t kB = kA * kCubic;

  __device__ static acc_t exp_neg_2u(acc_t v) {
    const acc_t a = v * (kA + kB * v * v);
    if constexpr (std::is_same_v<acc_t, float>) {
      return exp2f(a);  // MUFU.EX2, 2 ulp
    } else {
      return std::exp2(a);
    }
  }
  __device__ static acc_t divide(acc_t num, acc_t den) {
    if constexpr (std::is_same_v<acc_t, float>) {
      return __fdividef(num, den);  // MUFU.RCP and a multiply, 2 ulp (0 for den > 2^126)
    } else {
      return num / den;
    }
  }
  __device__ static acc_t value(acc_t v) { return divide(v, acc_t(1) + exp_neg_2u(v)); }
  // d/dv of value(v) = s + v s (1 - s) d(2u)/dv, d(2u)/dv = 2 sqrt(2/pi) (1 + 3 * 0.044715 v^2).
  __device__ static acc_t slope(acc_t v) {
    const acc_t e = exp_neg_2u(v);
    const acc_t s = divide(acc_t(1), acc_t(1) + e);
    const acc_t one_minus_s = e < acc_t(1) ? e * s : acc_t(1) - s;
    const acc_t du = acc_t(2) * kSqrt2OverPi * (acc_t(1) + acc_t(3) * kCubic * v * v);
    return s + v * s * one_minus_s * du;
  }
};

// T: x's dtype, B: bias's, kV: elements per access (kVec16<T>, or 1 on the scalar path).
template <typename T, typename B, int kV>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_forward_kernel(const T* __restrict__ x,     // (N, D)
                             const B* __restrict__ bias,  // (D,)
                             T* __restrict__ y,           // (N, D)
                             int64_t nvec, int64_t row_vecs) {
  using acc_t = acc_type<T>;
  pdl_begin();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
       i += stride) {
    const Vec<T, kV> xv = load_vec<T, kV>(x + i * kV);
    const Vec<B, kV> bv = load_vec<B, kV>(bias + (i % row_vecs) * kV);
    Vec<T, kV> out;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      out.v[k] = static_cast<T>(
          GeluTanh<acc_t>::value(static_cast<acc_t>(xv.v[k]) + static_cast<acc_t>(bv.v[k])));
    }
    store_vec<T, kV>(y + i * kV, out);
  }
}

template <typename T, typename B, int kV>
__global__ void __launch_bounds__(kCols* kRows)
    bias_gelu_backward_kernel(const T* __restrict__ dy,           // (N, D)
                              const T* __restrict__ x,            // (N, D)
                              const B* __restrict__ bias,         // (D,)
                              T* __restrict__ dx,                 // (N, D)
                              acc_type<T>* __restrict__ partial,  // (gridDim.y, D)
                              int64_t rows, int64_t row_vecs) {
  using acc_t = acc_type<T>;
  // [row lane][element][column lane]: a warp's 32 lanes touch 32 consecutive words.
  __shared__ acc_t lane_sum[kRows][kV][kCols];
  pdl_begin();
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;  // column vector
  const int64_t width = row_vecs * kV;
  acc_t sum[kV];
#pragma unroll
  for (int k = 0; k < kV; ++k) sum[k] = 0;
  if (j < row_vecs) {
    const Vec<B, kV> bv = load_vec<B, kV>(bias + j * kV);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kRows + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * kRows) {
      const int64_t off = r * width + j * kV;
      const Vec<T, kV> xv = load_vec<T, kV>(x + off);
      const Vec<T, kV> g = load_vec<T, kV>(dy + off);
      Vec<T, kV> out;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const acc_t v = static_cast<acc_t>(xv.v[k]) + static_cast<acc_t>(bv.v[k]);
        out.v[k] = static_cast<T>(static_cast<acc_t>(g.v[k]) * GeluTanh<acc_t>::slope(v));
        sum[k] += static_cast<acc_t>(out.v[k]);  // the rounded dx: dbias = dx.sum(0) exactly
      }
      store_vec<T, kV>(dx + off, out);
    }
  }
#pragma unroll
  for (int k = 0; k < kV; ++k) lane_sum[threadIdx.y][k][threadIdx.x] = sum[k];
  __syncthreads();
  if (threadIdx.y == 0 && j < row_vecs) {
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      acc_t t = 0;
#pragma unroll
      for (int l = 0; l < kRows; ++l) t += lane_sum[l][k][threadIdx.x];  // fixed order
      partial[static_cast<int64_t>(blockIdx.y) * width + j * kV + k] = t;
    }
  }
}

// Whether x, dy and the outputs allow kV-element accesses of T and bias of B (then so does every
// row start, as D % kV == 0).
template <typename T, typename B>
bool vector_path(int64_t width, std::initializer_list<const at::Tensor*> t_tensors,
                 const at::Tensor& bias) {
  constexpr int kV = kVec16<T>;
  if (width % kV != 0 || !is_aligned(bias.data_ptr(), sizeof(B) * kV)) return false;
  for (const at::Tensor* t : t_tensors) {
    if (!is_aligned(t->data_ptr(), sizeof(T) * kV)) return false;
  }
  return true;
}

// Calls f.template operator()<T, B>() for x's dtype T and bias's dtype B (T or float).
template <typename F>
void dispatch(const at::Tensor& x, const at::Tensor& bias, F&& f) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_gelu_cuda", [&] {
    if (bias.scalar_type() == x.scalar_type()) {
      f.template operator()<scalar_t, scalar_t>();
    } else {
      f.template operator()<scalar_t, float>();
    }
  });
}

}  // namespace

at::Tensor bias_gelu_forward_cuda(const at::Tensor& x, const at::Tensor& bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t width = x.size(1);
  if (x.numel() == 0) return y;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch(x, bias, [&]<typename T, typename B>() {
    auto launch = [&](auto kernel, int vec) {
      const int64_t nvec = x.numel() / vec;
      const int64_t blocks = std::min<int64_t>((nvec + kThreads - 1) / kThreads, int64_t{sms} * 8);
      launch_dependent(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                       x.data_ptr<T>(), bias.data_ptr<B>(), y.data_ptr<T>(), nvec, width / vec);
    };
    if (vector_path<T, B>(width, {&x, &y}, bias)) {
      launch(bias_gelu_forward_kernel<T, B, kVec16<T>>, kVec16<T>);
    } else {
      launch(bias_gelu_forward_kernel<T, B, 1>, 1);
    }
  });
  return y;
}

std::vector<at::Tensor> bias_gelu_backward_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                const at::Tensor& bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor dx = at::empty_like(x);
  at::Tensor dbias = at::empty_like(bias);
  const int64_t rows = x.size(0), width = x.size(1);
  if (x.numel() == 0) return {dx, dbias.zero_()};
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch(x, bias, [&]<typename T, typename B>() {
    using acc_t = acc_type<T>;
    auto launch = [&](auto kernel, int vec) {
      const int64_t row_vecs = width / vec;
      const int64_t gx = (row_vecs + kCols - 1) / kCols;
      // About one wave of 8 blocks (2048 threads) per SM; at most one row per row lane.
      const int64_t gy = std::clamp<int64_t>((int64_t{sms} * 8 + gx - 1) / gx, 1,
                                             std::min<int64_t>((rows + kRows - 1) / kRows, 65535));
      at::Tensor partial =
          at::empty({gy, width}, x.options().dtype(at::toOpMathType(x.scalar_type())));
      launch_dependent(kernel, dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
                       dim3(kCols, kRows), 0, stream, dy.data_ptr<T>(), x.data_ptr<T>(),
                       bias.data_ptr<B>(), dx.data_ptr<T>(), partial.data_ptr<acc_t>(), rows,
                       row_vecs);
      launch_sum_partials(partial.data_ptr<acc_t>(), dbias.data_ptr<B>(), gy, width, width, stream);
    };
    if (vector_path<T, B>(width, {&x, &dy, &dx}, bias)) {
      launch(bias_gelu_backward_kernel<T, B, kVec16<T>>, kVec16<T>);
    } else {
      launch(bias_gelu_backward_kernel<T, B, 1>, 1);
    }
  });
  return {dx, dbias};
}

bool bias_gelu_cuda_built() {
  return true;
}

}  // namespace brrr::detail
