#pragma once
// Op `linear_bias`: y = x W^T + b, as at::linear, whose backward sums the bias gradient with
// brrr's column-sum kernel instead of ATen's generic reduction.
//
//   x:      (..., in) float32, bf16, fp16 or float64 (under autocast: cast as autocast casts
//           at::linear's arguments, through its weight cache)
//   weight: (out, in), bias: (out,), x's dtype after that cast
//   returns (..., out) in that dtype
//
// Why: ATen's linear backward takes d(bias) = sum over rows of d(y) with reduce_kernel, which on
// an H200 moves a (16384, 768) bf16 gradient in 34 us (0.7 TB/s); GPT-2 runs 36 of them a step.
// (GPT's fused path now uses this op for c_attn alone, 12 a step: c_fc's bias gradient comes from
// bias_gelu, the c_proj ones from residual_layernorm's x_bias.)
// The forward is at::linear itself (one GEMM with the bias in its epilogue); the backward is
// ATen's two GEMMs (d x = d y W, d W = d y^T x, the shapes and transposes of addmm's backward)
// and column_sum (below) for d b.
// Saved for backward: x and weight (the tensors the GEMMs read; autocast saves the same casts).
//
// Paths: for CUDA tensors in a build with CUDA, the autograd Function; elsewhere at::linear (the
// reference and the CPU path). detail::linear_bias_function runs the Function on any device
// (d b by at::sum on the CPU), so its plumbing is tested without a GPU.
#include <ATen/core/Tensor.h>

namespace brrr {

/// The op, dispatched on x's device. Throws DataError naming shapes/dtypes for bad input.
at::Tensor linear_bias(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

/// Column sums of a 2-D tensor: (N, C) -> (C,) in its dtype, accumulated in float (double for
/// double), as at::sum(t, 0). CUDA tensors take the kernel in a build with CUDA; others at::sum.
///
/// Kernels (linear_bias.cu), deterministic (a fixed order of additions, no atomics):
/// - one launch on sm_90 and later, for 16-byte aligned rows with C % kV == 0 (kV = elements of
///   16 bytes) and as many slabs of 4 * kV columns as fill the SMs and run at once (544 <= C <=
///   1984 bf16 on an H200): clusters of 8 blocks, each cluster a slab over all rows; a warp reads
///   8 rows of 64 bytes at a time, and every warp's sums are stored into rank 0's shared memory
///   (st.async on an mbarrier), which adds them; only rank 0 waits. A programmatic dependent
///   launch: its blocks start while the kernel before it finishes and wait before their loads.
/// - two launches otherwise: blocks of 8 warps own a slab of 32 * kV columns and a chunk of rows
///   (a warp reads 512 consecutive bytes of a row), write float partials (chunks, C), and
///   sum_partials_kernel adds the chunks in order. C % kV != 0 or misaligned rows take this one
///   element a lane.
at::Tensor column_sum(const at::Tensor& t);

namespace detail {
/// The autograd Function on any device (arguments checked and already in one dtype).
at::Tensor linear_bias_function(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias);
/// column_sum's kernel launcher: t (N, C) contiguous CUDA float/bf16/fp16/double. one_launch =
/// false takes the two-launch path where the one-launch path would run (the bench and a test
/// compare them).
at::Tensor column_sum_cuda(const at::Tensor& t, bool one_launch = true);
/// Whether column_sum_cuda(t) takes the one-launch path on t's device.
bool column_sum_takes_one_launch(const at::Tensor& t);
/// Whether this build has the CUDA kernel.
bool linear_bias_cuda_built();
}  // namespace detail

}  // namespace brrr
