// residual_layernorm's CUDA kernels (see residual_layernorm.h for the op).
//
// Launch shapes:
//   forward: 8 warps (256 threads) a block, one warp per row, grid ceil(N / 8). A GPT-2 row
//     (C = 768, 3 KB in float32) is 192 16-byte vectors, 6 per lane: one warp covers a row in a
//     few loads, and its sums are shuffles, with no shared memory and no block barrier. Rows of
//     up to 8 vectors a lane stay in registers (102 of them a thread for a float32 residual): all
//     of a row's loads are in flight at once, and the variance and normalisation passes read the
//     registers (measured on an H200: 0.048-0.050 ms a GPT-2 layer against 0.054 ms re-reading
//     the cache, bench/RESULTS.md section 6).
//   backward: up to 8 warps a block (fewer when C is so large that their shared memory would not
//     fit), each warp walking the rows warp, warp + all warps, ...; grid = the blocks that are
//     resident at once (occupancy x SMs), at most one row per warp. Each warp adds dy * xhat and
//     dy of its rows into its own slice of shared memory, each column owned by one lane (no
//     races, no atomics); the block then adds its warps' slices in warp order into its row of
//     partials (grid, 2, C), and sum_partials_kernel adds the rows in order. With x_bias, d(x) is
//     summed too, for x_bias's gradient: partials (grid, 3, C), three outputs of one launch.
//     Under a float32 stream with a 16-bit y, rows of up to 1024 columns keep those sums in
//     registers (see kDxChunks); others in a third slice, 50 % more shared memory a warp, which
//     cuts the warps an SM from 32 to 24 at C = 768.
// The kernels are bound by memory: forward reads residual and x and writes new_residual and y
// (on its cache path, re-reading new_residual from the cache); backward reads new_residual, dy and
// d_new_residual twice (the second time from the cache) and writes d_residual (and d_x when x
// has its own, narrower dtype: the bf16 branch output under a float32 residual stream).
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/ops/kernel_utils.cuh"
#include "core/ops/residual_layernorm.h"

namespace brrr::detail {

namespace {

constexpr int kFwdWarps = 8;
constexpr int kBwdMaxWarps = 8;
// Chunks a lane keeps in registers on the forward's vector path (its kPerLane), for rows of up to
// 32 * 8 16-byte chunks: C <= 1024 in float32, 2048 in bf16/fp16. Wider rows take kPerLane 0.
constexpr int kChunksPerLane = 8;
// Chunks a lane keeps d(x)'s sums for in the backward's registers (its kDxRegs) with x_bias: 8
// chunks of 4 float sums, so rows of up to 1024 columns, for a float32 stream T with a 16-bit y
// (out_t), the mixed-precision case (GPT's). Within the 64 registers a thread that 32 warps an SM
// allow, ptxas (sm_90) fits that case without spilling, and spilled every other (a float32 y, a
// 16-bit or float64 stream): those sum in a third shared-memory slice (0).
template <typename T, typename out_t>
constexpr int kDxChunks = std::is_same_v<T, float> && sizeof(out_t) == 2 ? 8 : 0;

// T: residual's dtype, X: x's (T, or bf16/fp16 under a float32 residual), out_t: y's, kV:
// elements per access (kVec16<T>, or 1 on the scalar path). kPerLane > 0: a lane keeps its
// chunks j = lane + 32 q, q < kPerLane, in registers (needs C / kV <= 32 kPerLane): the row is read
// once, all its loads in flight together, and the variance pass and the normalisation run on the
// registers. kPerLane = 0: any C, each pass re-reads the lane's own writes from the cache.
template <typename T, typename X, typename out_t, int kV, int kPerLane>
__global__ void __launch_bounds__(kFwdWarps* kWarpSize)
    ln_forward_kernel(const T* __restrict__ residual,          // (N, C)
                      const X* __restrict__ x,                 // (N, C)
                      const acc_type<T>* __restrict__ weight,  // (C,)
                      const acc_type<T>* __restrict__ bias,    // (C,)
                      const acc_type<T>* __restrict__ x_bias,  // (C,) or null
                      T* __restrict__ h,                       // (N, C) new residual
                      out_t* __restrict__ y,                   // (N, C)
                      acc_type<T>* __restrict__ mean_out,      // (N,)
                      acc_type<T>* __restrict__ rstd_out,      // (N,)
                      int64_t rows, int64_t channels, acc_type<T> eps) {
  using acc_t = acc_type<T>;
  pdl_begin();
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kFwdWarps + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave: no barrier below
  const int64_t chunks = channels / kV, off = row * channels;
  // s = residual + (x + x_bias) rounded to T: the new residual, whose statistics are what is
  // saved. Chunk j's x_bias is read with it (from the cache: C floats for all rows).
  auto add = [&](const Vec<T, kV>& r, const Vec<X, kV>& v, int64_t j, Vec<T, kV>& s, acc_t& sum) {
    Vec<acc_t, kV> b;
    if (x_bias != nullptr) b = load_vec<acc_t, kV>(x_bias + j * kV);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      acc_t xv = static_cast<acc_t>(v.v[k]);
      if (x_bias != nullptr) xv += b.v[k];
      s.v[k] = static_cast<T>(static_cast<acc_t>(r.v[k]) + xv);
      sum += static_cast<acc_t>(s.v[k]);
    }
  };
  auto square = [](const Vec<T, kV>& s, acc_t mean, acc_t& sq) {
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const acc_t d = static_cast<acc_t>(s.v[k]) - mean;
      sq += d * d;
    }
  };
  auto normalise = [&](const Vec<T, kV>& s, int64_t j, acc_t mean, acc_t rstd) {
    const Vec<acc_t, kV> w = load_vec<acc_t, kV>(weight + j * kV);
    const Vec<acc_t, kV> b = load_vec<acc_t, kV>(bias + j * kV);
    Vec<out_t, kV> o;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      o.v[k] = static_cast<out_t>((static_cast<acc_t>(s.v[k]) - mean) * rstd * w.v[k] + b.v[k]);
    }
    store_vec<out_t, kV>(y + off + j * kV, o);
  };
  acc_t sum = 0, sq = 0, mean, rstd;
  if constexpr (kPerLane > 0) {
    Vec<T, kV> s[kPerLane];
    Vec<X, kV> v[kPerLane];
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {  // every load first: the whole row in flight
      const int64_t j = lane + q * kWarpSize;
      if (j < chunks) {
        s[q] = load_vec<T, kV>(residual + off + j * kV);
        v[q] = load_vec<X, kV>(x + off + j * kV);
      }
    }
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int64_t j = lane + q * kWarpSize;
      if (j < chunks) {
        add(s[q], v[q], j, s[q], sum);
        store_vec<T, kV>(h + off + j * kV, s[q]);
      }
    }
    mean = warp_sum(sum) / static_cast<acc_t>(channels);
    // Exact two-pass variance (no E[x^2] - mean^2 cancellation), on the registers.
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      if (lane + q * kWarpSize < chunks) square(s[q], mean, sq);
    }
    rstd = acc_t(1) / std::sqrt(warp_sum(sq) / static_cast<acc_t>(channels) + eps);
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int64_t j = lane + q * kWarpSize;
      if (j < chunks) normalise(s[q], j, mean, rstd);
    }
  } else {
    for (int64_t j = lane; j < chunks; j += kWarpSize) {
      Vec<T, kV> s;
      add(load_vec<T, kV>(residual + off + j * kV), load_vec<X, kV>(x + off + j * kV), j, s, sum);
      store_vec<T, kV>(h + off + j * kV, s);
    }
    mean = warp_sum(sum) / static_cast<acc_t>(channels);
    // Each lane re-reads only what it wrote itself, so no barrier is needed.
    for (int64_t j = lane; j < chunks; j += kWarpSize) {
      square(load_vec<T, kV>(h + off + j * kV), mean, sq);
    }
    rstd = acc_t(1) / std::sqrt(warp_sum(sq) / static_cast<acc_t>(channels) + eps);
    for (int64_t j = lane; j < chunks; j += kWarpSize) {
      normalise(load_vec<T, kV>(h + off + j * kV), j, mean, rstd);
    }
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Where lane-owned column (j * kV + k) of chunk j = lane + 32 q keeps its sum in a warp's slice:
// slot q * 32 kV + k * 32 + lane, so that a warp's 32 lanes touch 32 consecutive words for each
// (q, k): no shared-memory bank conflicts. A slice holds round_up(chunks, 32) * kV slots.
template <int kV>
__device__ __forceinline__ int64_t slot_of(int64_t j, int k) {
  return (j / kWarpSize) * kWarpSize * kV + k * kWarpSize + j % kWarpSize;
}

// T: residual's dtype, X: x's, out_t: dy's (y's), kV as in the forward. `sums` partial rows per
// block: dweight, dbias, and with 3 x_bias's gradient (d(x) before its rounding to X). Dynamic
// shared memory: a slice of `slice` acc_t per warp for each sum kept there: all `sums` with
// kDxRegs = 0; with kDxRegs > 0 (sums == 3, C / kV <= 32 kDxRegs) the lanes keep d(x)'s sums in
// registers, chunk j = lane + 32 q in dx_sum[q], and only dweight and dbias have slices: 6 KB a
// warp at C = 768 in float32 instead of 9, and the launch bounds hold the kernel to 64 registers
// (no spills on sm_90), so as many warps an SM as without x_bias (32). Either way a column's sum
// adds the warp's rows in row order, then the warps in order; the two kernels agree to float
// rounding, not to the bit (their occupancy differs, so a large N gets a different grid).
// dnew may be null (zero); dx is null when X is T (d_x is then d_residual itself). The row's
// second pass re-reads h and dy from the cache: a variant keeping them in registers (as the
// forward) needed 99 registers, ran 8 warps an SM against 32, and was slower on an H200 (0.067
// against 0.063 ms a GPT-2 layer, bench/RESULTS.md section 6).
template <typename T, typename X, typename out_t, int kV, int kDxRegs>
__global__ void __launch_bounds__(kBwdMaxWarps* kWarpSize, kDxRegs > 0 ? 4 : 1)
    ln_backward_kernel(const out_t* __restrict__ dy,            // (N, C)
                       const T* __restrict__ dnew,              // (N, C) or null
                       const T* __restrict__ h,                 // (N, C) saved new residual
                       const acc_type<T>* __restrict__ weight,  // (C,)
                       const acc_type<T>* __restrict__ mean,    // (N,)
                       const acc_type<T>* __restrict__ rstd,    // (N,)
                       T* __restrict__ dh,                      // (N, C) d_residual
                       X* __restrict__ dx,                      // (N, C) d_x, or null
                       acc_type<T>* __restrict__ partial,       // (gridDim.x, sums, C)
                       int64_t rows, int64_t channels, int64_t slice, int sums) {
  using acc_t = acc_type<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_begin();
  const int warps = blockDim.x / kWarpSize;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slices = kDxRegs > 0 ? 2 : sums;  // in shared memory, a warp
  acc_t* const sum_dw = reinterpret_cast<acc_t*>(smem) + warp * slices * slice;  // this warp's
  acc_t* const sum_db = sum_dw + slice;
  acc_t* const sum_dx = sum_db + slice;  // used when sums == 3 and kDxRegs == 0
  const bool x_bias_grad = sums == 3;
  acc_t dx_sum[kDxRegs > 0 ? kDxRegs : 1][kV] = {};
  const int64_t chunks = channels / kV;
  for (int64_t j = lane; j < chunks; j += kWarpSize) {
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      sum_dw[slot_of<kV>(j, k)] = sum_db[slot_of<kV>(j, k)] = 0;
      if (kDxRegs == 0 && x_bias_grad) sum_dx[slot_of<kV>(j, k)] = 0;
    }
  }
  const acc_t inv_c = acc_t(1) / static_cast<acc_t>(channels);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * warps) {
    const int64_t off = row * channels;
    const acc_t m = mean[row], r = rstd[row];
    acc_t mean_g = 0, mean_gx = 0;  // sums over the row of g = dy * w and of g * xhat
    for (int64_t j = lane; j < chunks; j += kWarpSize) {
      const Vec<T, kV> hv = load_vec<T, kV>(h + off + j * kV);
      const Vec<out_t, kV> d = load_vec<out_t, kV>(dy + off + j * kV);
      const Vec<acc_t, kV> w = load_vec<acc_t, kV>(weight + j * kV);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const acc_t xhat = (static_cast<acc_t>(hv.v[k]) - m) * r;
        const acc_t dk = static_cast<acc_t>(d.v[k]);
        mean_g += dk * w.v[k];
        mean_gx += dk * w.v[k] * xhat;
        sum_dw[slot_of<kV>(j, k)] += dk * xhat;
        sum_db[slot_of<kV>(j, k)] += dk;
      }
    }
    mean_g = warp_sum(mean_g) * inv_c;
    mean_gx = warp_sum(mean_gx) * inv_c;
    // The row again, from the cache: d_residual (and d_x) of chunk j, whose values before the
    // rounding to X go to add_dx(k, value).
    auto second = [&](int64_t j, auto&& add_dx) {
      const Vec<T, kV> hv = load_vec<T, kV>(h + off + j * kV);
      const Vec<out_t, kV> d = load_vec<out_t, kV>(dy + off + j * kV);
      const Vec<acc_t, kV> w = load_vec<acc_t, kV>(weight + j * kV);
      Vec<T, kV> n;
      if (dnew != nullptr) n = load_vec<T, kV>(dnew + off + j * kV);
      Vec<T, kV> o;
      Vec<X, kV> ox;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const acc_t xhat = (static_cast<acc_t>(hv.v[k]) - m) * r;
        acc_t v = r * (static_cast<acc_t>(d.v[k]) * w.v[k] - mean_g - xhat * mean_gx);
        if (dnew != nullptr) v += static_cast<acc_t>(n.v[k]);
        o.v[k] = static_cast<T>(v);
        ox.v[k] = static_cast<X>(o.v[k]);  // as autograd's cast of d_residual to x's dtype
        add_dx(k, static_cast<acc_t>(o.v[k]));
      }
      store_vec<T, kV>(dh + off + j * kV, o);
      if (dx != nullptr) store_vec<X, kV>(dx + off + j * kV, ox);
    };
    if constexpr (kDxRegs > 0) {
#pragma unroll
      for (int q = 0; q < kDxRegs; ++q) {
        const int64_t j = lane + q * kWarpSize;
        if (j < chunks) second(j, [&](int k, acc_t v) { dx_sum[q][k] += v; });
      }
    } else {
      for (int64_t j = lane; j < chunks; j += kWarpSize) {
        second(j, [&](int k, acc_t v) {
          if (x_bias_grad) sum_dx[slot_of<kV>(j, k)] += v;
        });
      }
    }
  }
  __syncthreads();
  // The block's sums of each warp's slice `which`, warp by warp in order, into its partial row
  // `row`, written by column: slot s of a slice holds column j * kV + k.
  const acc_t* const all = reinterpret_cast<const acc_t*>(smem);
  acc_t* const out = partial + static_cast<int64_t>(blockIdx.x) * sums * channels;
  auto write_sums = [&](int which, int row) {
    for (int64_t s = threadIdx.x; s < slice; s += blockDim.x) {
      const int64_t j = (s / (kWarpSize * kV)) * kWarpSize + s % kWarpSize;
      if (j >= chunks) continue;  // padding of the last group of 32 chunks
      acc_t t = 0;
      for (int w = 0; w < warps; ++w) t += all[(w * slices + which) * slice + s];
      out[row * channels + j * kV + (s / kWarpSize) % kV] = t;
    }
  };
  for (int which = 0; which < slices; ++which) write_sums(which, which);  // dw, db (, d x_bias)
  if constexpr (kDxRegs > 0) {
    // d(x)'s register sums through each warp's dweight slice, read above: the same order.
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kDxRegs; ++q) {
      const int64_t j = lane + q * kWarpSize;
      if (j < chunks) {
#pragma unroll
        for (int k = 0; k < kV; ++k) sum_dw[slot_of<kV>(j, k)] = dx_sum[q][k];
      }
    }
    __syncthreads();
    write_sums(0, 2);
  }
}

// Whether every pointer allows kV-element accesses: C % kV == 0 and each base aligned to
// kV elements of its type (then every row start is too). Undefined tensors do not count.
template <typename T, typename X, typename out_t>
bool vector_path(int64_t channels, std::initializer_list<const at::Tensor*> t_tensors,
                 const at::Tensor& x_tensor, const at::Tensor& out_tensor,
                 const at::Tensor& weight) {
  constexpr int kV = kVec16<T>;
  if (channels % kV != 0) return false;
  for (const at::Tensor* t : t_tensors) {
    if (t->defined() && !is_aligned(t->data_ptr(), sizeof(T) * kV)) return false;
  }
  return (!x_tensor.defined() || is_aligned(x_tensor.data_ptr(), sizeof(X) * kV)) &&
         is_aligned(out_tensor.data_ptr(), sizeof(out_t) * kV) &&
         is_aligned(weight.data_ptr(), sizeof(acc_type<T>) * kV);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<X>{}) with x's element type X: residual's own T, or bf16/fp16 when T is float
// (check_args admits nothing else).
template <typename T, typename F>
void dispatch_x(at::ScalarType x_dtype, F&& f) {
  if (x_dtype == c10::CppTypeToScalarType<T>::value) return f(TypeTag<T>{});
  if constexpr (std::is_same_v<T, float>) {
    if (x_dtype == at::kBFloat16) return f(TypeTag<c10::BFloat16>{});
    if (x_dtype == at::kHalf) return f(TypeTag<c10::Half>{});
  }
  throw DataError(std::string("residual_layernorm: x of dtype ") + c10::toString(x_dtype) +
                  " under a residual of " + c10::toString(c10::CppTypeToScalarType<T>::value) +
                  " has no kernel");
}

}  // namespace

std::vector<at::Tensor> residual_layernorm_forward_cuda(
    const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
    const at::Tensor& bias, double eps, at::ScalarType out_dtype, const at::Tensor& x_bias,
    bool rows_in_registers) {
  const c10::cuda::CUDAGuard guard(residual.device());
  const int64_t rows = residual.size(0), channels = residual.size(1);
  at::Tensor h = at::empty_like(residual);
  at::Tensor y = at::empty(residual.sizes(), residual.options().dtype(out_dtype));
  at::Tensor mean = at::empty({rows}, weight.options());
  at::Tensor rstd = at::empty({rows}, weight.options());
  if (rows == 0) return {h, y, mean, rstd};
  const auto blocks = static_cast<unsigned>((rows + kFwdWarps - 1) / kFwdWarps);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, residual.scalar_type(), "rln_fwd", [&] {
    using T = scalar_t;
    using acc_t = acc_type<T>;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_dtype, "rln_fwd_out", [&] {
      using out_t = scalar_t;
      dispatch_x<T>(x.scalar_type(), [&](auto tag) {
        using X = typename decltype(tag)::type;
        auto launch = [&](auto kernel) {
          launch_dependent(kernel, dim3(blocks), dim3(kFwdWarps * kWarpSize), 0, stream,
                           residual.data_ptr<T>(), x.data_ptr<X>(), weight.data_ptr<acc_t>(),
                           bias.data_ptr<acc_t>(),
                           x_bias.defined() ? x_bias.data_ptr<acc_t>() : nullptr, h.data_ptr<T>(),
                           y.data_ptr<out_t>(), mean.data_ptr<acc_t>(), rstd.data_ptr<acc_t>(),
                           rows, channels, static_cast<acc_t>(eps));
        };
        constexpr int kV = kVec16<T>;
        if (!vector_path<T, X, out_t>(channels, {&residual, &h}, x, y, weight) ||
            !is_aligned(bias.data_ptr(), sizeof(acc_t) * kV) ||
            (x_bias.defined() && !is_aligned(x_bias.data_ptr(), sizeof(acc_t) * kV))) {
          launch(ln_forward_kernel<T, X, out_t, 1, 0>);
        } else if (rows_in_registers && channels / kV <= kWarpSize * kChunksPerLane) {
          launch(ln_forward_kernel<T, X, out_t, kV, kChunksPerLane>);
        } else {
          launch(ln_forward_kernel<T, X, out_t, kV, 0>);
        }
      });
    });
  });
  return {h, y, mean, rstd};
}

namespace {

// Warps per backward block: kBwdMaxWarps, halved until their shared memory (sums slices each)
// fits the device.
int backward_warps(int64_t channels, size_t slice_bytes, int sums) {
  const auto limit =
      static_cast<size_t>(at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin);
  int warps = kBwdMaxWarps;
  while (warps > 0 && warps * sums * slice_bytes > limit) warps /= 2;
  if (warps == 0) {
    // std::to_string: nvcc cannot evaluate fmt's compile-time format checks.
    throw DataError("residual_layernorm: C = " + std::to_string(channels) +
                    " is too large for the backward kernel (" + std::to_string(sums) +
                    " C sums per warp must fit in " + std::to_string(limit) +
                    " bytes of shared memory)");
  }
  return warps;
}

}  // namespace

std::vector<at::Tensor> residual_layernorm_backward_cuda(
    const at::Tensor& dy, const at::Tensor& d_new_residual, const at::Tensor& new_residual,
    const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
    at::ScalarType x_dtype, bool x_bias_grad, bool x_bias_sums_in_registers) {
  const c10::cuda::CUDAGuard guard(dy.device());
  const int64_t rows = new_residual.size(0), channels = new_residual.size(1);
  at::Tensor dh = at::empty_like(new_residual);
  // d_x in x's own dtype, written by the same pass (no cast kernel after it); d_residual when the
  // dtypes agree.
  const bool own_dx = x_dtype != new_residual.scalar_type();
  at::Tensor dx = own_dx ? at::empty_like(new_residual, new_residual.options().dtype(x_dtype)) : dh;
  at::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(weight);
  at::Tensor dx_bias = x_bias_grad ? at::empty_like(weight) : at::Tensor();
  const int sums = x_bias_grad ? 3 : 2;
  if (rows == 0) {
    if (x_bias_grad) dx_bias.zero_();
    return {dh, dweight.zero_(), dbias.zero_(), dx, dx_bias};
  }
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, new_residual.scalar_type(), "rln_bwd", [&] {
        using T = scalar_t;
        using acc_t = acc_type<T>;
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, dy.scalar_type(), "rln_bwd_dy", [&] {
              using out_t = scalar_t;
              dispatch_x<T>(x_dtype, [&](auto tag) {
                using X = typename decltype(tag)::type;
                // dx_regs: the kernel keeps d x_bias's sums in registers (kDxRegs > 0).
                auto launch = [&](auto kernel, int vec, bool dx_regs) {
                  const int64_t slice =
                      (channels / vec + kWarpSize - 1) / kWarpSize * kWarpSize * vec;
                  const int slices = dx_regs ? 2 : sums;
                  const int warps = backward_warps(channels, slice * sizeof(acc_t), slices);
                  const size_t smem = static_cast<size_t>(warps) * slices * slice * sizeof(acc_t);
                  C10_CUDA_CHECK(cudaFuncSetAttribute(
                      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
                  int per_sm = 0;
                  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, kernel, warps * kWarpSize, smem));
                  const int64_t blocks = std::min<int64_t>((rows + warps - 1) / warps,
                                                           int64_t{std::max(per_sm, 1)} * sms);
                  at::Tensor partial = at::empty({blocks, sums, channels}, weight.options());
                  launch_dependent(
                      kernel, dim3(static_cast<unsigned>(blocks)), dim3(warps * kWarpSize), smem,
                      stream, dy.data_ptr<out_t>(),
                      d_new_residual.defined() ? d_new_residual.data_ptr<T>() : nullptr,
                      new_residual.data_ptr<T>(), weight.data_ptr<acc_t>(), mean.data_ptr<acc_t>(),
                      rstd.data_ptr<acc_t>(), dh.data_ptr<T>(), own_dx ? dx.data_ptr<X>() : nullptr,
                      partial.data_ptr<acc_t>(), rows, channels, slice, sums);
                  // dweight, dbias (and d x_bias), side by side in each block's row: one launch.
                  const SumOutputs<acc_t> outs{{dweight.data_ptr<acc_t>(), dbias.data_ptr<acc_t>(),
                                                x_bias_grad ? dx_bias.data_ptr<acc_t>() : nullptr},
                                               channels};
                  launch_sum_partials(partial.data_ptr<acc_t>(), outs, blocks, sums * channels,
                                      sums * channels, stream);
                };
                constexpr int kV = kVec16<T>;
                if (!vector_path<T, X, out_t>(channels, {&new_residual, &d_new_residual, &dh}, dx,
                                              dy, weight)) {
                  launch(ln_backward_kernel<T, X, out_t, 1, 0>, 1, false);
                } else if (x_bias_grad && x_bias_sums_in_registers && kDxChunks<T, out_t> > 0 &&
                           channels / kV <= kWarpSize * kDxChunks<T, out_t>) {
                  launch(ln_backward_kernel<T, X, out_t, kV, kDxChunks<T, out_t>>, kV, true);
                } else {
                  launch(ln_backward_kernel<T, X, out_t, kV, 0>, kV, false);
                }
              });
            });
      });
  return {dh, dweight, dbias, dx, dx_bias};
}

bool residual_layernorm_cuda_built() {
  return true;
}

}  // namespace brrr::detail
