// fused_classifier's CUDA kernels (see fused_classifier.h for the op).
//
// Launch shape, both kernels: one block of kThreads = 512 threads per row, grid N. A GPT-2 row
// is V = 50304 bf16 = 98 KB, 6288 16-byte vectors: about 12 per thread, read with consecutive
// threads on consecutive vectors (coalesced), kUnroll = 4 loads in flight per thread. A block
// per row keeps the row's (max, sum) reduction inside one block (no second pass, no atomics),
// and with several blocks resident per SM one block's reduction overlaps the others' loads.
// Both kernels are bound by memory: forward reads the logits once, backward reads and writes
// them once; each does one exp per element.
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <ATen/ATen.h>

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

// Calls f(i, value) for every element of the row, value in the accumulator type; this thread
// takes its share (block-strided). The body loads kUnroll vectors before using the first, so
// each thread keeps several 16-byte loads in flight.
template <typename T, typename F>
__device__ __forceinline__ void visit_row(const T* __restrict__ p, int64_t n, F&& f) {
  using acc_t = acc_type<T>;
  constexpr int kV = kVec16<T>;
  const RowSplit<T> s(p, n);
  for (int64_t i = threadIdx.x; i < s.head; i += blockDim.x) f(i, static_cast<acc_t>(p[i]));
  for (int64_t v0 = threadIdx.x; v0 < s.nvec; v0 += kUnroll * blockDim.x) {
    Vec<T, kV> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + u * blockDim.x;
      if (v < s.nvec) x[u] = load_vec<T, kV>(p + s.head + v * kV);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + u * blockDim.x;
      if (v >= s.nvec) break;
#pragma unroll
      for (int k = 0; k < kV; ++k) f(s.head + v * kV + k, static_cast<acc_t>(x[u].v[k]));
    }
  }
  for (int64_t i = s.body_end + threadIdx.x; i < n; i += blockDim.x) {
    f(i, static_cast<acc_t>(p[i]));
  }
}

// p[i] = f(i, p[i]) for every element of the row (f returns the accumulator type, rounded once
// to T here), with the same split, share and batching as visit_row.
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
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + u * blockDim.x;
      if (v < s.nvec) x[u] = load_vec<T, kV>(p + s.head + v * kV);
    }
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

// Online softmax state: m the running max, s = sum of exp(x - m) over the values seen. One exp
// per value either way the comparison goes.
template <typename acc_t>
struct MaxSum {
  acc_t m, s;
  __device__ void add(acc_t x) {
    if (x > m) {
      s = s * std::exp(m - x) + acc_t(1);
      m = x;
    } else {
      s += std::exp(x - m);  // NaN x lands here and makes s NaN, as it should
    }
  }
  __device__ void merge(acc_t m2, acc_t s2) {
    const acc_t mm = m > m2 ? m : m2;
    s = s * std::exp(m - mm) + s2 * std::exp(m2 - mm);
    m = mm;
  }
};

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
  const int64_t row = blockIdx.x;
  const scalar_t* x = logits + row * vocab;
  MaxSum<acc_t> a{lowest<acc_t>(), acc_t(0)};
  visit_row(x, vocab, [&](int64_t, acc_t v) { a.add(v); });
  a = block_max_sum(a);
  if (threadIdx.x == 0) {
    const acc_t l = a.m + std::log(a.s);
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
        classifier_forward_kernel<scalar_t><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            logits.data_ptr<scalar_t>(), targets.data_ptr<int64_t>(), row_loss.data_ptr<acc_t>(),
            lse.data_ptr<acc_t>(), vocab, ignore_index);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
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
        classifier_backward_kernel<scalar_t><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            logits.data_ptr<scalar_t>(), targets.data_ptr<int64_t>(), lse.data_ptr<acc_t>(),
            grad_output.data_ptr<acc_t>(), n_valid.data_ptr<acc_t>(), vocab, ignore_index);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

bool fused_classifier_cuda_built() {
  return true;
}

}  // namespace brrr::detail
