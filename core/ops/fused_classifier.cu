// fused_classifier's and lm_head_loss's CUDA kernels (see fused_classifier.h for the ops).
//
// Launch shape, every row kernel: one block of kThreads = 512 threads per row, grid N. A GPT-2 row
// is V = 50304 bf16 = 98 KB, 6288 16-byte vectors: about 12 per thread, read with consecutive
// threads on consecutive vectors (coalesced), kUnroll = 4 loads in flight per thread. A block
// per row keeps the row's (max, sum) reduction inside one block (no second pass, no atomics),
// and with several blocks resident per SM one block's reduction overlaps the others' loads.
//
// The (max, sum of exp) pass is written for the issue rate as much as for memory: a 16-byte
// vector's values share one max and at most one rescale, and each value costs one fused
// multiply-add and one exp2 on the special function unit (ex2.approx), so the pass stays under
// the time its bytes take (at 4.2 TB/s a bf16 value arrives every 0.5 ps; the SFU's exp2 rate
// of 16 a clock per SM is one every 0.24 ps).
//
//   classifier_forward_kernel       reads the row: loss and lse (fused_classifier's forward)
//   classifier_backward_kernel      reads and writes the row: (softmax - onehot) * scale
//   classifier_forward_grad_kernel  reads the row, then reads it again (from L2: the rows in
//                                   flight, 2 blocks x 132 SMs x 98 KB = 26 MB, fit the 50 MB L2)
//                                   and writes softmax - onehot in its place; loss per row
//                                   (lm_head_loss's forward with grad: its backward has no pass
//                                   over the logits at all)
//   scale_kernel                    t *= *scale in float, rounded once (lm_head_loss's backward)
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/ops/fused_classifier.h"
#include "core/ops/kernel_utils.cuh"

namespace brrr::detail {

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;       // 16-byte loads in flight per thread in a row's body
constexpr int kBlocksPerSm = 2;  // caps registers at 64 a thread: 1024 threads resident per SM

// One row of n elements at p, split at 16-byte boundaries: [0, head) before the first aligned
// element, then nvec whole vectors of kV elements, then the tail [body_end, n). p is aligned to
// sizeof(T) (an element address), so head is a whole number of elements, under kV.
template <typename T>
struct RowSplit {
  static constexpr int kV = kVec16<T>;
  int64_t head, nvec, body_end;
  __device__ RowSplit(const T* p, int64_t n) {
    const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16);
    head = misaligned == 0 ? 0 : (16 - misaligned) / static_cast<int64_t>(sizeof(T));
    head = head < n ? head : n;
    nvec = (n - head) / kV;
    body_end = head + nvec * kV;
  }
};

// Loads this thread's batch of the row's body: vectors v0, v0 + blockDim.x, ... (kUnroll of
// them, those that exist), every load issued before any is used.
template <typename T>
__device__ __forceinline__ void load_batch(const T* __restrict__ p, const RowSplit<T>& s,
                                           int64_t v0, Vec<T, kVec16<T>> (&x)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = v0 + u * blockDim.x;
    if (v < s.nvec) x[u] = load_vec<T, kVec16<T>>(p + s.head + v * kVec16<T>);
  }
}

// p[i] = f(i, p[i]) for every element of the row (f returns the accumulator type, rounded once
// to T here): the unaligned head and tail element by element, the body in block-strided 16-byte
// vectors, kUnroll loads in flight before the first is used.
template <typename T, typename F>
__device__ __forceinline__ void transform_row(T* __restrict__ p, int64_t n, F&& f) {
  using acc_t = acc_type<T>;
  constexpr int kV = kVec16<T>;
  const RowSplit<T> s(p, n);
  for (int64_t i = threadIdx.x; i < s.head; i += blockDim.x) {
    p[i] = static_cast<T>(f(i, static_cast<acc_t>(p[i])));
  }
  for (int64_t v0 = threadIdx.x; v0 < s.nvec; v0 += kUnroll * blockDim.x) {
    Vec<T, kV> x[kUnroll];
    load_batch(p, s, v0, x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + u * blockDim.x;
      if (v < s.nvec) {
        const int64_t i0 = s.head + v * kV;
        Vec<T, kV> y;
#pragma unroll
        for (int k = 0; k < kV; ++k)
          y.v[k] = static_cast<T>(f(i0 + k, static_cast<acc_t>(x[u].v[k])));
        store_vec<T, kV>(p + i0, y);
      }
    }
  }
  for (int64_t i = s.body_end + threadIdx.x; i < n; i += blockDim.x) {
    p[i] = static_cast<T>(f(i, static_cast<acc_t>(p[i])));
  }
}

// exp2 on the special function unit: ex2.approx, about 2 ulp relative; a result below float's
// smallest normal flushes to 0 (a softmax term of under 1e-38). exp2 for double.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ double fast_exp2(double x) {
  return exp2(x);
}

template <typename acc_t>
constexpr acc_t kLog2e = static_cast<acc_t>(1.4426950408889634);

// Online softmax state: m the running max of the values seen, s = sum of exp(x - m) over them,
// kept as exp2(x log2 e - m log2 e). A NaN value makes s NaN (the max skips it, its term does
// not); a +inf value makes s NaN too (inf - inf), where log_softmax would give inf: either way
// the loss is not finite.
template <typename acc_t>
struct MaxSum {
  acc_t m, s;
  // Adds kN values: one max over them, at most one rescale of s, then one exp2 a value.
  template <int kN>
  __device__ __forceinline__ void add(const acc_t (&x)[kN]) {
    acc_t mx = x[0];
#pragma unroll
    for (int k = 1; k < kN; ++k) mx = mx > x[k] ? mx : x[k];
    if (mx > m) {
      s *= fast_exp2((m - mx) * kLog2e<acc_t>);
      m = mx;
    }
    const acc_t ml = m * kLog2e<acc_t>;
#pragma unroll
    for (int k = 0; k < kN; ++k) s += fast_exp2(fma(x[k], kLog2e<acc_t>, -ml));
  }
  __device__ void merge(acc_t m2, acc_t s2) {
    const acc_t mm = m > m2 ? m : m2;
    s = s * fast_exp2((m - mm) * kLog2e<acc_t>) + s2 * fast_exp2((m2 - mm) * kLog2e<acc_t>);
    m = mm;
  }
  // log-sum-exp in base 2: log2(sum of exp(x)) = m log2 e + log2(s).
  __device__ acc_t lse2() const {
    return m * kLog2e<acc_t> + log2(s);
  }
};

// This thread's (m, s) over its share of a row of n elements at p (the split and the batching of
// transform_row: block-strided 16-byte vectors, kUnroll in flight).
template <typename T>
__device__ __forceinline__ MaxSum<acc_type<T>> thread_max_sum(const T* __restrict__ p, int64_t n) {
  using acc_t = acc_type<T>;
  constexpr int kV = kVec16<T>;
  const RowSplit<T> split(p, n);
  MaxSum<acc_t> a{lowest<acc_t>(), acc_t(0)};
  auto add_one = [&](int64_t i) {
    const acc_t x[1] = {static_cast<acc_t>(p[i])};
    a.add(x);
  };
  for (int64_t i = threadIdx.x; i < split.head; i += blockDim.x) add_one(i);
  for (int64_t v0 = threadIdx.x; v0 < split.nvec; v0 += kUnroll * blockDim.x) {
    Vec<T, kV> raw[kUnroll];
    load_batch(p, split, v0, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (v0 + u * blockDim.x >= split.nvec) break;
      acc_t x[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) x[k] = static_cast<acc_t>(raw[u].v[k]);
      a.add(x);
    }
  }
  for (int64_t i = split.body_end + threadIdx.x; i < n; i += blockDim.x) add_one(i);
  return a;
}

// The block's combined (m, s), valid in warp 0. Fixed combining order: deterministic.
template <typename acc_t>
__device__ MaxSum<acc_t> block_max_sum(MaxSum<acc_t> a) {
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ acc_t warp_m[kWarps], warp_s[kWarps];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    a.merge(__shfl_xor_sync(0xffffffffu, a.m, offset), __shfl_xor_sync(0xffffffffu, a.s, offset));
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) {
    warp_m[warp] = a.m;
    warp_s[warp] = a.s;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < kWarps ? MaxSum<acc_t>{warp_m[lane], warp_s[lane]}
                      : MaxSum<acc_t>{lowest<acc_t>(), acc_t(0)};
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      a.merge(__shfl_xor_sync(0xffffffffu, a.m, offset), __shfl_xor_sync(0xffffffffu, a.s, offset));
    }
  }
  return a;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    classifier_forward_kernel(const scalar_t* __restrict__ logits,        // (N, V)
                              const int64_t* __restrict__ targets,        // (N,)
                              acc_type<scalar_t>* __restrict__ row_loss,  // (N,)
                              acc_type<scalar_t>* __restrict__ lse,       // (N,)
                              int64_t vocab, int64_t ignore_index) {
  using acc_t = acc_type<scalar_t>;
  pdl_begin();
  const int64_t row = blockIdx.x;
  const scalar_t* x = logits + row * vocab;
  const MaxSum<acc_t> a = block_max_sum(thread_max_sum(x, vocab));
  if (threadIdx.x == 0) {
    const acc_t l = a.lse2() / kLog2e<acc_t>;
    lse[row] = l;
    const int64_t t = targets[row];
    if (t == ignore_index) {
      row_loss[row] = acc_t(0);
    } else if (t < 0 || t >= vocab) {
      row_loss[row] = static_cast<acc_t>(NAN);  // no throw without a sync
    } else {
      row_loss[row] = l - static_cast<acc_t>(x[t]);
    }
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    classifier_backward_kernel(scalar_t* __restrict__ logits,        // (N, V) in: logits, out: grad
                               const int64_t* __restrict__ targets,  // (N,)
                               const acc_type<scalar_t>* __restrict__ lse,    // (N,)
                               const acc_type<scalar_t>* __restrict__ grad,   // ()
                               const acc_type<scalar_t>* __restrict__ count,  // () n_valid
                               int64_t vocab, int64_t ignore_index) {
  using acc_t = acc_type<scalar_t>;
  pdl_begin();
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index;
  const bool valid = !ignored && t >= 0 && t < vocab;  // uniform over the block
  const acc_t fill = ignored ? acc_t(0) : static_cast<acc_t>(NAN);
  const acc_t scale = *grad / *count;
  const acc_t l = lse[row];
  transform_row(logits + row * vocab, vocab, [&](int64_t i, acc_t v) -> acc_t {
    if (!valid) return fill;
    return (std::exp(v - l) - (i == t ? acc_t(1) : acc_t(0))) * scale;
  });
}

// lm_head_loss's forward with grad: row_loss as classifier_forward_kernel's, and the row
// overwritten with softmax - onehot(target) (unscaled: the backward scales the matmuls' outputs);
// 0 in ignored rows, NaN where the target is out of range.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    classifier_forward_grad_kernel(scalar_t* __restrict__ logits,  // (N, V) in: logits, out: grad
                                   const int64_t* __restrict__ targets,        // (N,)
                                   acc_type<scalar_t>* __restrict__ row_loss,  // (N,)
                                   int64_t vocab, int64_t ignore_index) {
  using acc_t = acc_type<scalar_t>;
  __shared__ acc_t row_lse2;
  pdl_begin();
  const int64_t row = blockIdx.x;
  scalar_t* x = logits + row * vocab;
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index;
  if (ignored || t < 0 || t >= vocab) {  // uniform over the block
    const acc_t fill = ignored ? acc_t(0) : static_cast<acc_t>(NAN);
    transform_row(x, vocab, [&](int64_t, acc_t) { return fill; });
    if (threadIdx.x == 0) row_loss[row] = fill;
    return;
  }
  // Thread 0 keeps the target's logit: the row is overwritten after the reduction's barriers.
  const acc_t xt = threadIdx.x == 0 ? static_cast<acc_t>(x[t]) : acc_t(0);
  const MaxSum<acc_t> a = block_max_sum(thread_max_sum(x, vocab));
  if (threadIdx.x == 0) {
    row_lse2 = a.lse2();
    row_loss[row] = a.lse2() / kLog2e<acc_t> - xt;
  }
  __syncthreads();
  const acc_t l2 = row_lse2;
  transform_row(x, vocab, [&](int64_t, acc_t v) { return fast_exp2(fma(v, kLog2e<acc_t>, -l2)); });
  __syncthreads();  // the target's element was written above, by whichever thread owns it
  if (threadIdx.x == 0) {
    x[t] = static_cast<scalar_t>(fast_exp2(fma(xt, kLog2e<acc_t>, -l2)) - acc_t(1));
  }
}

// t[i] *= *scale for i < n, in float (double for double), rounded once to T. kN = kVec16<T>
// when t is 16-byte aligned, else 1. Grid-strided over vectors; the last n % kN elements by the
// first threads.
template <typename T, int kN>
__global__ void scale_kernel(T* __restrict__ t, int64_t n, const acc_type<T>* __restrict__ scale) {
  using acc_t = acc_type<T>;
  pdl_begin();
  const acc_t k = *scale;
  const int64_t nvec = n / kN;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = first; v < nvec; v += stride) {
    Vec<T, kN> x = load_vec<T, kN>(t + v * kN);
#pragma unroll
    for (int j = 0; j < kN; ++j) x.v[j] = static_cast<T>(static_cast<acc_t>(x.v[j]) * k);
    store_vec<T, kN>(t + v * kN, x);
  }
  const int64_t i = nvec * kN + first;
  if (i < n) t[i] = static_cast<T>(static_cast<acc_t>(t[i]) * k);
}

void check_grid(int64_t rows) {
  if (rows > std::numeric_limits<int32_t>::max()) {  // gridDim.x's limit
    throw DataError("fused_classifier: more than 2^31 - 1 rows (" + std::to_string(rows) + ")");
  }
}

}  // namespace

std::vector<at::Tensor> fused_classifier_forward_cuda(const at::Tensor& logits,
                                                      const at::Tensor& targets,
                                                      int64_t ignore_index) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const auto acc = logits.options().dtype(at::toOpMathType(logits.scalar_type()));
  at::Tensor row_loss = at::empty({rows}, acc), lse = at::empty({rows}, acc);
  if (rows == 0) return {row_loss, lse};
  check_grid(rows);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, logits.scalar_type(), "fused_classifier_forward_cuda", [&] {
        using acc_t = acc_type<scalar_t>;
        launch_dependent(classifier_forward_kernel<scalar_t>, dim3(static_cast<unsigned>(rows)),
                         dim3(kThreads), 0, stream, logits.data_ptr<scalar_t>(),
                         targets.data_ptr<int64_t>(), row_loss.data_ptr<acc_t>(),
                         lse.data_ptr<acc_t>(), vocab, ignore_index);
      });
  return {row_loss, lse};
}

void fused_classifier_backward_cuda(const at::Tensor& logits, const at::Tensor& targets,
                                    const at::Tensor& lse, const at::Tensor& grad_output,
                                    const at::Tensor& n_valid, int64_t ignore_index) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  check_grid(rows);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, logits.scalar_type(), "fused_classifier_backward_cuda", [&] {
        using acc_t = acc_type<scalar_t>;
        launch_dependent(classifier_backward_kernel<scalar_t>, dim3(static_cast<unsigned>(rows)),
                         dim3(kThreads), 0, stream, logits.data_ptr<scalar_t>(),
                         targets.data_ptr<int64_t>(), lse.data_ptr<acc_t>(),
                         grad_output.data_ptr<acc_t>(), n_valid.data_ptr<acc_t>(), vocab,
                         ignore_index);
      });
}

at::Tensor fused_classifier_forward_grad_cuda(const at::Tensor& logits, const at::Tensor& targets,
                                              int64_t ignore_index) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  at::Tensor row_loss =
      at::empty({rows}, logits.options().dtype(at::toOpMathType(logits.scalar_type())));
  if (rows == 0) return row_loss;
  check_grid(rows);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, logits.scalar_type(), "fused_classifier_forward_grad_cuda", [&] {
        using acc_t = acc_type<scalar_t>;
        launch_dependent(classifier_forward_grad_kernel<scalar_t>,
                         dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream,
                         logits.data_ptr<scalar_t>(), targets.data_ptr<int64_t>(),
                         row_loss.data_ptr<acc_t>(), vocab, ignore_index);
      });
  return row_loss;
}

void scale_cuda_(const at::Tensor& t, const at::Tensor& scale) {
  if (!t.is_contiguous() || scale.dim() != 0 || scale.device() != t.device() ||
      scale.scalar_type() != at::toOpMathType(t.scalar_type())) {
    throw Error(
        "scale_cuda_: expected a contiguous tensor and a 0-dim scale of its accumulator "
        "type on its device");
  }
  const c10::cuda::CUDAGuard guard(t.device());
  const int64_t n = t.numel();
  if (n == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  constexpr int kBlock = 256;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "scale_cuda_", [&] {
    using acc_t = acc_type<scalar_t>;
    constexpr int kV = kVec16<scalar_t>;
    const bool vec = is_aligned(t.data_ptr(), 16);
    const int64_t items = vec ? n / kV + 1 : n;  // + 1: the tail's threads
    const auto sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const auto grid =
        static_cast<unsigned>(std::min<int64_t>((items + kBlock - 1) / kBlock, int64_t{sms} * 16));
    launch_dependent(vec ? scale_kernel<scalar_t, kV> : scale_kernel<scalar_t, 1>, dim3(grid),
                     dim3(kBlock), 0, stream, t.data_ptr<scalar_t>(), n, scale.data_ptr<acc_t>());
  });
}

bool fused_classifier_cuda_built() {
  return true;
}

}  // namespace brrr::detail
